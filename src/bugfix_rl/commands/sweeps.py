"""Arm names of a sweep: a run is labelled by what its sweep varied.

`report` groups runs by (arm, seed). The arm is set by an ablation file (`+ablation=kl` -> arm kl) or
by `arm=`; a sweep over anything else (`env.reward=hidden,mixed -m`, `algo=grpo,dapo -m`) used to give
every run the arm `default`, and the report kept one run per seed and dropped the rest. So a sweep
that varies keys other than `seed`, and does not set `arm=` itself, gets one more override: its arm is
the run's own values of the swept keys (`env.reward=hidden`; with `+ablation=kl,sft` too:
`kl,env.reward=hidden`), read from Hydra's per-job `override_dirname` restricted to the swept keys.
The resolver itself, arm_label, is config's (config/resolvers.py), registered with the schemas; such
a label as a value on a later command line (`report reference=...`, `eval ckpt=...`) is quoted for
Hydra by quote_labels.
"""

from __future__ import annotations

from hydra.experimental.callback import Callback

from bugfix_rl.config.resolvers import ARM_FROM_FILE

NOT_AN_ARM = ("seed",)  # swept keys that are not part of the arm: report pairs the arms over seeds


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


def quote_labels(args: list[str]) -> list[str]:
    """`reference=env.reward=hidden` or `ckpt=<sweep>/env.reward=hidden_seed0_0` as Hydra can parse them
    (the value quoted): a sweep's arm label, and so its run dirs, hold `=` (and `,` when several keys
    vary), which Hydra reads as syntax; an unquoted value with `=` is never valid Hydra."""
    quoted = []
    for arg in args:
        key, _, value = arg.partition("=")
        plain = not arg.startswith("-") and value[:1] not in ("'", '"', "$", "[", "{")
        quoted.append(f"{key}='{value}'" if plain and "=" in value and "'" not in value else arg)
    return quoted


SCORE_NAMES = {"heldout": "held-out", "test": "test", "validation": "validation"}


class SweepProgress(Callback):
    """A sweep's progress and its next command (Hydra callback, conf/train.yaml's hydra.callbacks).

    Each job, as it starts: `[k/N] <the job's values of the swept keys>` on stderr (N: the product of
    the swept values, as Hydra's basic sweeper counts them). The sweep's end, once every job is done:
    the `bugfix-rl report dir=<sweep dir>` command that compares its runs, and, when the runs' own last
    lines gave another pass@1 than the one report compares (validation or test, while report uses the
    held-out tasks every run evaluated: evaluate/ablation.choose_source), one line saying so. Nothing
    in a single run (RUN mode)."""

    def __init__(self):
        self.jobs: int | None = None
        self.swept: list[str] = []  # the swept keys (key_or_group), in command-line order
        self.sweep_dir: str | None = None

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.sweep_dir = str(config.hydra.sweep.dir)  # resolved once: ${now:...} is cached for the launcher too
        try:
            parsed = OverridesParser.create().parse_overrides(_task_overrides(config))
            swept = [o for o in parsed if o.is_sweep_override()]
            self.swept = [o.key_or_group for o in swept]
            self.jobs = 1
            for override in swept:
                self.jobs *= len(list(override.sweep_string_iterator()))
        except Exception:  # noqa: BLE001  (a sweep syntax this count does not know: the lines say k only)
            self.jobs = None

    def on_job_start(self, config, **kwargs) -> None:
        import sys

        from hydra.types import RunMode

        if config.hydra.mode != RunMode.MULTIRUN:
            return
        overrides = [o for o in _task_overrides(config) if not o.startswith(("hydra.", "arm='${", "arm=${"))]
        shown = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] in self.swept] or overrides
        total = f"/{self.jobs}" if self.jobs else ""
        print(f"[{config.hydra.job.num + 1}{total}] {' '.join(shown)}", file=sys.stderr, flush=True)

    def on_multirun_end(self, config, **kwargs) -> None:
        for line in sweep_end_lines(self.sweep_dir or str(config.hydra.sweep.dir), self.jobs):
            print(line, flush=True)


def _task_overrides(config) -> list[str]:
    """The command line's overrides as written (unresolved: the arm label's interpolation
    (arm_overrides) resolves only inside a job)."""
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]


def sweep_end_lines(sweep_dir: str, jobs: int | None) -> list[str]:
    """The lines that end a sweep: its runs and the report command, and whether the runs' printed
    pass@1 (test, else validation: console.print_outcome) is on other tasks than report's (held-out
    when every run has it, else test)."""
    import json
    import shlex
    from pathlib import Path

    sweep = Path(sweep_dir).absolute()
    results = []
    for path in sorted(sweep.rglob("eval.json")):
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if not results:
        return [f"sweep done: {jobs or 'its'} jobs in {sweep}"]
    lines = [f"sweep done: {len(results)} runs in {sweep}; compare them with: "
             f"{shlex.join(['bugfix-rl', 'report', f'dir={sweep}'])}"]
    printed = {"test" if "test" in result else "validation" for result in results}
    source = next((s for s in ("heldout", "test") if all(s in result for result in results)), None)
    if source and printed != {source}:
        shown = " or ".join(SCORE_NAMES[s] for s in sorted(printed, reverse=True))
        why = " (eval.heldout_n > 0)" if source == "heldout" else ""
        lines.append(f"note: each run's line above gives its chosen checkpoint's {shown} pass@1; report compares"
                     f" the arms on their {SCORE_NAMES[source]} pass@1{why}")
    return lines
