"""Rollout pools: where a step's episodes are sampled and graded.

A pool takes a list of tasks (one group each) and returns their trajectories, stamped with the
version of the weights that sampled them. `submit` starts the work and `result` waits for it, so the
trainer can keep later steps' batches in flight while it updates (bounded staleness, run/trainer.py).
Weights are published with `set_weights(model, version)`; work submitted afterwards uses them.

- `InlinePool` (rollout.workers=0): the trainer's own model and generator, sampled at submit time.
  The book's random stream: a synchronous run is bit-identical to one without pools.
- `ShardedLocalPool` (workers=N, engine=local) and `RayPool` (workers=N, engine=ray, rollout/ray_pool.py)
  split the groups into N shards, each sampled from its own seed by `sample_job`, so a shard's
  episodes do not depend on which worker runs it or when: the two give the same trajectories.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch

from bugfix_rl.gym.tasks import Task
from bugfix_rl.rollout.jobs import draw_names, group_job, sample_job, shard_jobs, stamp
from bugfix_rl.types import Trajectory


class InlinePool:
    """Samples in the caller's process with the last published model and the caller's generator, at
    submit time."""

    def __init__(self, model, tokenizer, make_env: Callable):
        self.model, self.tokenizer, self.make_env = model, tokenizer, make_env
        self.version = 0

    def set_weights(self, model, version: int) -> None:
        self.model, self.version = model, version  # in the trainer: the live model itself, nothing copied

    def submit(self, tasks: list[Task], group_size: int, temperature: float, generator: torch.Generator,
               first_group: int = 0) -> list[Trajectory]:
        names = draw_names(len(tasks) * group_size, generator)
        job = group_job(tasks, group_size, first_group, names, temperature, seed=0)
        return stamp(sample_job(self.model, self.tokenizer, self.make_env, job, generator), self.version)

    def result(self, pending: list[Trajectory]) -> list[Trajectory]:
        return pending

    def close(self) -> None:
        pass


class ShardedLocalPool:
    """RayPool's computation without Ray: the shards run one after another on a replica of the weights."""

    def __init__(self, model, tokenizer, make_env: Callable, shards: int):
        self.replica = copy.deepcopy(model).eval()
        self.tokenizer, self.make_env, self.shards = tokenizer, make_env, shards
        self.version = 0

    def set_weights(self, model, version: int) -> None:
        self.replica.load_state_dict(model.state_dict())
        self.version = version

    def submit(self, tasks: list[Task], group_size: int, temperature: float, generator: torch.Generator,
               first_group: int = 0) -> list[Trajectory]:
        jobs = shard_jobs(tasks, group_size, first_group, temperature, self.shards, generator)
        return stamp([t for job in jobs for t in sample_job(self.replica, self.tokenizer, self.make_env, job)],
                     self.version)

    def result(self, pending: list[Trajectory]) -> list[Trajectory]:
        return pending

    def close(self) -> None:
        pass


def make_pool(cfg, model, tokenizer, make_env: Callable):
    """The pool rollout.workers / rollout.engine select (see RolloutConfig)."""
    rollout = cfg.rollout
    if rollout.workers == 0:
        return InlinePool(model, tokenizer, make_env)
    if rollout.engine == "local":
        return ShardedLocalPool(model, tokenizer, make_env, rollout.workers)
    from bugfix_rl.rollout.ray_pool import RayPool

    return RayPool(cfg, model, rollout.workers, rollout.worker_threads)
