"""A run's life beyond its steps: what it accumulates (RunState), the checkpoints it keeps, how it
resumes from one, what it says about itself (status.json), and ranks 1..N-1 following a sharded run.

A checkpoint holds the weights and everything a resumed run needs beyond them: the optimizer's state,
the sampling generator's state, the dashboard rows and validation results so far and, with
rollout.max_staleness > 0, the batches sampled for later steps (`Trainer.scheduled_batches`, each
episode with the weights version that sampled it). So a resumed run (cfg.resume, same seed, same
threads) trains on the same batches and reaches the uninterrupted run's parameters.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch.distributed as dist

from bugfix_rl.checkpoint import (CheckpointError, load_checkpoint, model_tensors, optimizer_state,
                                  optimizer_tensors, save_checkpoint)
from bugfix_rl.kernels import set_torch_threads
from bugfix_rl.policy.build import build_tokenizer_for
from bugfix_rl.recipes.starting_policy import build_starting_policy
from bugfix_rl.rollout.replay import schedule_from_record, schedule_record
from bugfix_rl.run.evaluations import validate_policy, validation_tasks
from bugfix_rl.run.learner import Learner, broadcast_weights, data_parallel, follow


@dataclass
class RunState:
    """What a run accumulates: dashboard rows and per-checkpoint validation results."""

    rows: list[dict] = field(default_factory=list)
    validation: dict[int, dict] = field(default_factory=dict)
    checkpoints: dict[int, Path] = field(default_factory=dict)
    stopped: dict | None = None  # {"step", "reason"} when a stop.* rule ended the run early
    started: float = field(default_factory=time.perf_counter)  # this process's start, for the wall clock


class RunInterrupted(Exception):
    """Ctrl-C during a run: `steps` training steps were done, `checkpoint` (None if none yet) resumes it."""

    def __init__(self, steps: int, checkpoint: Path | None):
        super().__init__(f"interrupted after {steps} steps")
        self.steps, self.checkpoint = steps, checkpoint


# ---------------------------------------------------------------------- checkpoints kept

def checkpoint_meta(cfg, step: int, tokenizer) -> dict:
    return {"kind": "policy", "step": step, "config": dataclasses.asdict(cfg),
            "vocab": list(tokenizer.words)}


def keep_checkpoint(step: int, policy, trainer, state: RunState, cfg, run_dir: Path, view) -> None:
    """Validate `policy` (eval.n_val episodes per task of eval.val_splits) and save it as step_NNN with the
    resume state; `view` (console.TrainConsole) says so."""
    path = run_dir / "checkpoints" / f"step_{step:03d}.safetensors"
    state.checkpoints[step] = path
    view.status(f"validating step {step}: {cfg.eval.n_val} episodes x {len(validation_tasks(cfg.eval.val_splits))}"
                f" tasks ({' + '.join(cfg.eval.val_splits)})")
    state.validation[step] = validate_policy(policy, trainer.tokenizer, trainer.make_env, cfg.eval,
                                             cfg.algo.temperature)
    resume_tensors, resume_meta = resume_state(trainer, state)
    save_checkpoint(path, {**model_tensors(policy), **resume_tensors},
                    {**checkpoint_meta(cfg, step, trainer.tokenizer), **resume_meta})
    view.checkpoint(step, state.validation[step])
    view.status(f"step {step} validation pass@1 {state.validation[step]['pass_at_1']:.3f}")


def last_saved(state: RunState) -> Path | None:
    """The newest checkpoint that is complete on disk (not one cut mid-write), or None."""
    saved = [step for step, path in state.checkpoints.items() if path.is_file()]
    return state.checkpoints[max(saved)] if saved else None


# ---------------------------------------------------------------------- resume

def announce_resume(resume: str, run_dir: Path) -> None:
    """Read the checkpoint first (a bad path must not wait for the RL base to be built) and say where
    the run continues from."""
    _, meta = load_checkpoint(resume)
    origin = Path(resume).resolve().parent.parent
    print(f"resuming {origin} from step {meta.get('step')} into {run_dir}", file=sys.stderr)


def resume_state(trainer, state: RunState) -> tuple[dict, dict]:
    """(tensors, metadata) that, beyond the weights, a resumed run needs: the optimizer's state (in the
    one-process format at any world size), the sampling generator, the rows and validations so far."""
    tensors, param_groups = optimizer_tensors(trainer.learner.optimizer_state())
    tensors["rng.generator"] = trainer.generator.get_state()
    return tensors, {"optimizer_param_groups": param_groups, "rows": state.rows,
            "rollout_schedule": schedule_record(trainer.scheduled_batches()),
            "validation": {str(s): v for s, v in state.validation.items()},
            "checkpoints": {str(s): str(p) for s, p in state.checkpoints.items()},
            "task_stats": trainer.task_stats.rate if trainer.task_stats else None}


def restore_run(path: str, trainer, state: RunState) -> int:
    """Load optimizer, generator, rows and validation from a checkpoint; returns the step to start at."""
    tensors, meta = load_checkpoint(path)
    if "rng.generator" not in tensors or "rows" not in meta:
        raise CheckpointError(f"{path} has no resume state (weights only)")
    trainer.learner.load_optimizer_state(optimizer_state(tensors, meta["optimizer_param_groups"]))
    trainer.generator.set_state(tensors["rng.generator"])
    trainer.sampled = schedule_from_record(meta.get("rollout_schedule", {}))  # before it: drawn again
    if trainer.task_stats is not None and meta.get("task_stats"):
        trainer.task_stats.rate = dict(meta["task_stats"])
    state.rows = list(meta["rows"])
    state.validation = {int(s): v for s, v in meta["validation"].items()}
    state.checkpoints = {int(s): Path(p) for s, p in meta["checkpoints"].items()}
    return int(meta["step"])


# ---------------------------------------------------------------------- status

def write_status(run_dir: Path, status: str, step: int, last_checkpoint: Path | None) -> None:
    """status.json (written atomically): whether the run finished ("complete"), was stopped by Ctrl-C
    ("interrupted") or by a failed update ("failed"), and where it stands."""
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(
        {"status": status, "step": step, "last_checkpoint": str(last_checkpoint) if last_checkpoint else None}))
    os.replace(tmp, run_dir / "status.json")


# ---------------------------------------------------------------------- the other ranks

def follow_run(cfg) -> None:
    """Ranks 1..N-1 of a sharded run: the same policy and learner as rank 0, which samples, evaluates,
    writes the run dir and tells these ranks when to update (learner.follow)."""
    set_torch_threads(cfg.threads)
    tokenizer = build_tokenizer_for(cfg)
    dist.barrier()  # rank 0 has built the RL base (or found it in the cache)
    base = build_starting_policy(cfg.policy, tokenizer, env_cfg=cfg.env)
    model = copy.deepcopy(base)
    broadcast_weights(base)
    broadcast_weights(model)
    learner = Learner(model, cfg.algo.lr, data_parallel(cfg.trainer))
    follow(learner, cfg.algo, base.eval() if cfg.algo.kl_coef > 0 else None)
    del learner, model, base  # FSDP2's sharded tensors go before the process group does (distributed._joined)
    gc.collect()
