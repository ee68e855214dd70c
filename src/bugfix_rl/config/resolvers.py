"""The resolvers conf/train.yaml's interpolations call: `${resumed_tag:${resume}}` in a run dir's name and
`${arm_label:...}` for the arm of each run of a sweep (commands/sweeps.py writes that override)."""

from __future__ import annotations

from pathlib import Path

ARM_FROM_FILE = "ablation"  # a group whose file sets the arm itself (conf/ablation/*.yaml)


def resumed_tag(resume) -> str:
    """The run dir's suffix naming a resumed run's origin: `_from_<origin>_step_<N>` ("" without resume),
    the origin by its start time when its name begins with one (conf/train.yaml's run dirs): a resumed
    run's name stays 67 characters (default arm), not 108, and a resume of a resume no longer grows it.
    Used by conf/train.yaml's hydra.run.dir as ${resumed_tag:${resume}}."""
    import re

    if not resume:
        return ""
    checkpoint = Path(str(resume))
    origin = checkpoint.resolve().parent.parent.name
    started = re.match(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}", origin)
    return f"_from_{started.group(0) if started else origin}_{checkpoint.stem}"


def arm_label(override_dirname: str) -> str:
    """The arm of one run of a sweep from its `key=value,...` overrides of the swept keys (Hydra's
    override_dirname, sorted): `+` prefixes dropped, an ablation by its name, `/` (a path value) as `_`
    so the label stays one folder name."""
    parts = []
    for item in override_dirname.split(","):
        key, _, value = item.lstrip("+~").partition("=")
        parts.insert(0, value) if key == ARM_FROM_FILE else parts.append(f"{key}={value}")
    return ",".join(parts).replace("/", "_") or "default"


def register_resolvers() -> None:
    """Register the resolvers with OmegaConf (once: registering a name twice is an error)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("resumed_tag"):
        OmegaConf.register_new_resolver("resumed_tag", resumed_tag)
    if not OmegaConf.has_resolver("arm_label"):  # a sweep's arm names (commands/sweeps.py)
        OmegaConf.register_new_resolver("arm_label", arm_label)
