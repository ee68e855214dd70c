"""Demonstrations for SFT: scripted oracle episodes on renamed tasks, or rejection sampling
(the policy's own successful episodes)."""

from __future__ import annotations

import random
from typing import Callable

import torch

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.tasks import OPERAND_POOL, Task, with_renamed_operands
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.rollout.sampler import scripted_episode
from bugfix_rl.types import Trajectory


def oracle_demonstrations(tasks: list[Task], count: int, make_env: Callable, tokenizer, oracle_cls,
                          seed: int, renamed_operands: bool = False,
                          on_episode: Callable[[], None] = lambda: None, model=None) -> list[Trajectory]:
    """`count` oracle episodes cycling over `tasks`, each with a freshly drawn function name (and, with
    renamed_operands, operands drawn from OPERAND_POOL, so a copy of the demonstrations must copy);
    on_episode() after each (a progress bar). A model with its own `demonstrate(env)` (a chat model:
    recipes/chat_demonstrations.py) plays the oracle in its own format; otherwise `oracle_cls` acts in
    the word format of `tokenizer`."""
    demonstrate = getattr(model, "demonstrate", None)
    rng = random.Random(seed)
    demos = []
    for i in range(count):
        task = tasks[i % len(tasks)]
        if renamed_operands:
            task = with_renamed_operands(task, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), f"demo{i}")
        env = make_env(task, rng.choice(RENAME_POOL))
        demos.append(demonstrate(env) if demonstrate else scripted_episode(oracle_cls(), env, tokenizer))
        on_episode()
    return demos


def rejection_sampled(model, tokenizer, tasks: list[Task], per_task: int, make_env: Callable, temperature: float,
                      seed: int) -> list[Trajectory]:
    """The policy's own episodes that earned reward 1 (per_task attempts per task)."""
    trajectories = sample_groups(model, tokenizer, tasks, per_task, make_env, temperature,
                                 torch.Generator().manual_seed(seed))
    return [t for t in trajectories if t.info.success]  # the true verdict: a flaky or shaped reward is not it
