"""Arm names of a sweep: a run is labelled by what its sweep varied.

`report` groups runs by (arm, seed). The arm is set by an ablation file (`+ablation=kl` -> arm kl) or
by `arm=`; a sweep over anything else (`env.reward=hidden,mixed -m`, `algo=grpo,dapo -m`) used to give
every run the arm `default`, and the report kept one run per seed and dropped the rest. So a sweep
that varies keys other than `seed`, and does not set `arm=` itself, gets one more override: its arm is
the run's own values of the swept keys (`env.reward=hidden`; with `+ablation=kl,sft` too:
`kl,env.reward=hidden`), read from Hydra's per-job `override_dirname` restricted to the swept keys.
Imports nothing from bugfix_rl, so config.py can register the resolver.
"""

from __future__ import annotations

NOT_AN_ARM = ("seed",)  # swept keys that are not part of the arm: report pairs the arms over seeds
ARM_FROM_FILE = "ablation"  # a group whose file sets the arm itself (conf/ablation/*.yaml)


def arm_label(override_dirname: str) -> str:
    """The arm of one run of a sweep from its `key=value,...` overrides of the swept keys (Hydra's
    override_dirname, sorted): `+` prefixes dropped, an ablation by its name, `/` (a path value) as `_`
    so the label stays one folder name."""
    parts = []
    for item in override_dirname.split(","):
        key, _, value = item.lstrip("+~").partition("=")
        parts.insert(0, value) if key == ARM_FROM_FILE else parts.append(f"{key}={value}")
    return ",".join(parts).replace("/", "_") or "default"


def arm_overrides(overrides) -> list[str]:
    """Extra Hydra overrides naming the arm of each run of a sweep by what the sweep varies, or [] when
    the sweep sets `arm=` itself or varies only `seed` and ablations (whose files name the arm).
    `overrides`: the command line's parsed Hydra overrides (hydra.core.override_parser Override)."""
    swept = [o.key_or_group for o in overrides if o.is_sweep_override()]
    named = {o.key_or_group for o in overrides} & {"arm"}
    varying = [key for key in swept if key not in NOT_AN_ARM]
    if named or not [key for key in varying if key != ARM_FROM_FILE]:
        return []
    fixed = sorted({o.key_or_group for o in overrides if o.key_or_group not in varying
                    and not o.key_or_group.startswith("hydra")} | {"arm"})
    return [f"hydra.job.config.override_dirname.exclude_keys=[{','.join(fixed)}]",
            "arm='${arm_label:${hydra:job.override_dirname}}'"]


def single_job_note(overrides) -> str | None:
    """One line for `-m` without a swept value: it runs a single job (in the sweep layout), which the
    user may not have meant (it used to pass silently)."""
    if any(o.is_sweep_override() for o in overrides):
        return None
    return ("-m with no key=a,b values runs one job (laid out as a sweep); give values to sweep"
            " (e.g. seed=0,1,2 -m) or drop -m for a single run")
