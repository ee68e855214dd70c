"""Sampling jobs: which episodes one worker samples, with which names and seed (used by every pool,
in-process or in Ray actors)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import torch

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.rewards import episode_seed
from bugfix_rl.gym.tasks import Task
from bugfix_rl.rollout.env_errors import check_batch
from bugfix_rl.rollout.sampler import sample_episodes
from bugfix_rl.types import Trajectory


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
    # each env's own stream (flaky tests): from the job's seed, or the caller's generator state, which
    # moves every call; reading the state draws nothing, so the sampling stream is untouched
    stream = job.seed if generator is None else zlib.crc32(generator.get_state().numpy().tobytes())
    for index, env in enumerate(envs):
        if hasattr(env, "seed"):
            env.seed(episode_seed(stream, job.groups[index], index))
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
