"""Demonstrations for SFT: scripted oracle episodes on renamed tasks, or rejection sampling
(the policy's own successful episodes)."""

from __future__ import annotations

import random
from typing import Callable

import torch

from bugfix_rl.gym.edit_menu import RENAME_POOL
from bugfix_rl.gym.tasks import OPERAND_POOL, Task, with_renamed_operands
from bugfix_rl.recipes.chat_demonstrations import chat_oracle_for, chat_scripted_episode
from bugfix_rl.registry import Registry
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.rollout.sampler import policy_kind, scripted_episode
from bugfix_rl.types import Trajectory


def oracle_demonstrations(tasks: list[Task], count: int, make_env: Callable, tokenizer, oracle_cls,
                          seed: int, renamed_operands: bool = False,
                          on_episode: Callable[[], None] = lambda: None, model=None) -> list[Trajectory]:
    """`count` oracle episodes cycling over `tasks`, each with a freshly drawn function name (and, with
    renamed_operands, operands drawn from OPERAND_POOL, so a copy of the demonstrations must copy);
    on_episode() after each (a progress bar). The oracle plays as `model` would act (oracle_episode): a
    chat model in chat tool calls, otherwise `oracle_cls` in the word format of `tokenizer`."""
    rng = random.Random(seed)
    demos = []
    for i in range(count):
        task = tasks[i % len(tasks)]
        if renamed_operands:
            task = with_renamed_operands(task, rng.sample(OPERAND_POOL, len(OPERAND_POOL)), f"demo{i}")
        env = make_env(task, rng.choice(RENAME_POOL))
        demos.append(oracle_episode(model, tokenizer, oracle_cls, env))
        on_episode()
    return demos


def _word_oracle_episode(model, tokenizer, oracle_cls, env) -> Trajectory:
    return scripted_episode(oracle_cls(), env, tokenizer)


def _chat_oracle_episode(model, tokenizer, oracle_cls, env) -> Trajectory:
    return chat_scripted_episode(chat_oracle_for(env), env, model.path)


# policy kind (rollout/sampler.policy_kind) -> (model, tokenizer, oracle_cls, env) -> one oracle episode
ORACLE_EPISODES = Registry("policy kind", {"word": _word_oracle_episode, "chat": _chat_oracle_episode})


def oracle_episode(model, tokenizer, oracle_cls, env) -> Trajectory:
    """The env's oracle played for `model` (None: a word-tokenizer policy): a chat model plays its rule in
    chat tool calls through its token path (recipes/chat_demonstrations.py); otherwise `oracle_cls` acts
    in the word format of `tokenizer`."""
    return ORACLE_EPISODES[policy_kind(model)](model, tokenizer, oracle_cls, env)


def rejection_sampled(model, tokenizer, tasks: list[Task], per_task: int, make_env: Callable, temperature: float,
                      seed: int) -> list[Trajectory]:
    """The policy's own episodes that earned reward 1 (per_task attempts per task)."""
    trajectories = sample_groups(model, tokenizer, tasks, per_task, make_env, temperature,
                                 torch.Generator().manual_seed(seed))
    return [t for t in trajectories if t.info.success]  # the true verdict: a flaky or shaped reward is not it
