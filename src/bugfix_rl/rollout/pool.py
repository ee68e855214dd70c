"""Rollout pools: where a step's episodes are sampled and graded.

A pool takes a list of tasks (one group each) and returns their trajectories, stamped with the
version of the weights that sampled them. `submit` starts the work and `result` waits for it, so the
trainer can keep later steps' batches in flight while it updates (bounded staleness, train.py).
Weights are published with `set_weights(model, version)`; work submitted afterwards uses them.

- `InlinePool` (rollout.workers=0): the trainer's own model and generator, sampled at submit time.
  The book's random stream: a synchronous run is bit-identical to one without pools.
- `ShardedLocalPool` (workers=N, engine=local) and `RayPool` (workers=N, engine=ray, rollout/ray_pool.py)
  split the groups into N shards, each sampled from its own seed by `sample_job`, so a shard's
  episodes do not depend on which worker runs it or when: the two give the same trajectories.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.tasks import Task
from bugfix_rl.rollout.env_errors import check_batch
from bugfix_rl.rollout.sampler import sample_episodes
from bugfix_rl.rollout.trajectory import Trajectory


@dataclass
class EpisodeJob:
    """Episodes for one worker: per episode its task, shown name and group; one seed for the shard."""

    tasks: list[Task]
    names: list[str]
    groups: list[int]
    temperature: float
    seed: int


def draw_names(n: int, generator: torch.Generator) -> list[str]:
    """n shown function names from the rename pool (the first draw of every sampling call)."""
    return [RENAME_POOL[i] for i in torch.randint(len(RENAME_POOL), (n,), generator=generator).tolist()]


def group_job(tasks: list[Task], group_size: int, first_group: int, names: list[str], temperature: float,
              seed: int) -> EpisodeJob:
    """group_size episodes of each task with the given shown names; groups numbered from first_group."""
    return EpisodeJob([task for task in tasks for _ in range(group_size)], names,
                      [first_group + i for i in range(len(tasks)) for _ in range(group_size)], temperature, seed)


def sample_job(model, tokenizer, make_env: Callable, job: EpisodeJob,
               generator: torch.Generator | None = None) -> list[Trajectory]:
    """Sample one job's episodes in one batch, from `generator` or else a fresh one seeded by job.seed.
    Episodes whose env raised come back failed (env_errors.py); a batch of nothing else raises."""
    envs = [make_env(task, name) for task, name in zip(job.tasks, job.names)]
    generator = generator if generator is not None else torch.Generator().manual_seed(job.seed)
    return check_batch(sample_episodes(model, tokenizer, envs, job.groups, job.temperature, generator))


def shard_jobs(tasks: list[Task], group_size: int, first_group: int, temperature: float, shards: int,
               generator: torch.Generator) -> list[EpisodeJob]:
    """Split a sampling call into at most `shards` jobs of whole groups, each with its own seed.

    The names are drawn first, as in the inline path, then one base seed; shard i uses base + i.
    """
    names = draw_names(len(tasks) * group_size, generator)
    base = int(torch.randint(2**62, (1,), generator=generator))
    whole = group_job(tasks, group_size, first_group, names, temperature, base)
    jobs = []
    for i, chunk in enumerate(torch.arange(len(tasks)).chunk(min(shards, len(tasks)))):  # contiguous groups
        episodes = slice(int(chunk[0]) * group_size, (int(chunk[-1]) + 1) * group_size)
        jobs.append(EpisodeJob(whole.tasks[episodes], whole.names[episodes], whole.groups[episodes], temperature,
                               base + i))
    return jobs


def stamp(trajectories: list[Trajectory], version: int) -> list[Trajectory]:
    for t in trajectories:
        t.policy_version = version
    return trajectories


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
