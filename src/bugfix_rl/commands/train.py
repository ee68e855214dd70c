"""`bugfix-rl train [overrides]`: one RL run in the run dir Hydra made (a sweep's job under -m).

Also the train command's own argument handling before Hydra composes: `resume=<run dir>` stands for
that run's last checkpoint (resolve_resume), and a Ctrl-C prints the command that continues the run.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def train_command(cfg, run_dir: Path) -> bool:
    """Train (rank 0 writes the run dir; under torchrun the other ranks follow it) and print the outcome:
    True. A Ctrl-C ends the run with one line on stderr, the last checkpoint and the command that
    resumes from it: False (the CLI's exit code 130)."""
    from bugfix_rl.present.console import print_outcome
    from bugfix_rl.run.distributed import learner_ranks
    from bugfix_rl.run.lifecycle import RunInterrupted, follow_run
    from bugfix_rl.run.training import run_training

    try:
        with learner_ranks(cfg) as rank:
            if rank > 0:  # under torchrun: a follower of rank 0, which writes the run dir
                follow_run(cfg)
                return True
            result = run_training(cfg, run_dir)
    except RunInterrupted as err:
        if err.checkpoint is None:
            print(f"{err}, before the first checkpoint: nothing to resume ({run_dir})", file=sys.stderr)
        else:
            print(f"{err}; last checkpoint {err.checkpoint}; resume with: {resume_command(err.checkpoint, cfg.arm)}",
                  file=sys.stderr)
        return False
    print_outcome(result, run_dir)  # a sweep's end prints the report command (sweeps.SweepProgress)
    return True


def resume_command(checkpoint: Path, arm: str) -> str:
    """The command that continues this run from `checkpoint`: the same overrides (so the same config);
    a sweep's arm label (sweeps.py) as the value it resolved to."""
    from hydra.core.hydra_config import HydraConfig

    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("resume=")]
    if any(o.startswith(("arm=${", "arm='${")) for o in overrides):
        overrides = [o for o in overrides if not o.startswith("arm=")] + [f"arm='{arm}'"]
    return shlex.join(["bugfix-rl", "train", *overrides, f"resume={checkpoint}"])


def resolve_resume(args: list[str]) -> tuple[list[str], list[str]]:
    """(`args` with each `resume=<run dir>` value replaced by that run's last checkpoint (inputs.
    resume_checkpoint), one line per replacement naming the checkpoint). Done before Hydra composes, so
    the run dir's name (config.resumed_tag), the checks (inputs.check_resume), training and a Ctrl-C's
    resume command all see the checkpoint file. A folder without checkpoints raises UserError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bugfix_rl.commands.inputs import resume_checkpoint
    from bugfix_rl.config.overrides import FLAGS_WITH_VALUE

    resolved, notes, skip = [], [], False
    for arg in args:
        plain = not skip and not arg.startswith("-")
        skip = not plain and arg in FLAGS_WITH_VALUE and "=" not in arg
        override = OverridesParser.create().parse_override(arg) if plain else None
        if override is None or override.key_or_group != "resume" or override.is_delete():
            resolved.append(arg)
            continue
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
        files = [resume_checkpoint(value) if isinstance(value, str) else value for value in values]
        for folder, file in zip(values, files):
            if file != folder:
                notes.append(f"resume={folder} is a run dir: resuming from its last checkpoint {file}")
        if files == values:
            resolved.append(arg)
        else:
            quoted = [f"'{file}'" if "'" not in file else file for file in files]
            resolved.append(f"{arg.split('=', 1)[0]}={','.join(quoted)}")
    return resolved, notes
