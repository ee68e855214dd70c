"""Evaluation of a policy on a task split: success counts, behaviour statistics, action sequences.

Every evaluation draws from its own generator, seeded by the caller, so evaluating a checkpoint in the
middle of training never moves the training random stream.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import torch

from bugfix_rl.gym.tasks import Task
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.rollout.env_errors import infrastructure_failure
from bugfix_rl.types import Trajectory


def sample_trajectories(model, tokenizer, tasks: list[Task], n: int, make_env: Callable, temperature: float,
                        seed: int) -> list[Trajectory]:
    """n episodes per task (contiguous per task) from a generator seeded with `seed`."""
    generator = torch.Generator().manual_seed(seed)
    return sample_groups(model, tokenizer, tasks, n, make_env, temperature, generator)


def success_counts(trajectories: list[Trajectory], n_tasks: int) -> torch.Tensor:
    """Successes per task [n_tasks] from task-contiguous trajectories.

    Success is the episode's hidden-test verdict (info.success), not its training reward: under
    reward=public a hardcoded table is paid 1.0 but fixes nothing.
    """
    successes = torch.tensor([float(t.info.success) for t in trajectories])
    return successes.view(n_tasks, -1).sum(1).long()


def infra_failed(trajectories: list[Trajectory]) -> int:
    """Episodes whose outcome the infrastructure decided (rollout/env_errors.infrastructure_failure).
    Evaluations count them as failures (every task keeps its n episodes); eval.json says how many."""
    return sum(1 for t in trajectories if infrastructure_failure(t.info))


def sample_counts(model, tokenizer, tasks: list[Task], n: int, make_env: Callable, temperature: float,
                  seed: int) -> torch.Tensor:
    """Successes out of n per task [T], with its own seeded generator."""
    return success_counts(sample_trajectories(model, tokenizer, tasks, n, make_env, temperature, seed), len(tasks))


def behaviour_stats(trajectories: list[Trajectory]) -> dict[str, float]:
    """Per-episode means of each episode's `info.metrics()`, plus reward, policy tokens and length."""
    n = max(len(trajectories), 1)
    totals: dict[str, float] = {"reward": sum(t.reward for t in trajectories)}
    for t in trajectories:
        for key, value in t.info.metrics().items():
            totals[key] = totals.get(key, 0.0) + float(value)
    totals["policy_tokens"] = sum(t.policy_tokens for t in trajectories)
    totals["length"] = sum(len(t.ids) for t in trajectories)
    return {key: value / n for key, value in totals.items()}


def action_sequences(trajectories: list[Trajectory], top: int = 5) -> list[tuple[int, str]]:
    """The `top` most common action sequences, e.g. (60, 'read -> swap_minmax -> test -> submit')."""
    def step(action: str) -> str:
        return action.split(" ", 1)[1] if action.startswith("edit ") else action

    counts = Counter(" -> ".join(step(a) for a in t.info.actions) for t in trajectories)
    return [(c, seq) for seq, c in counts.most_common(top)]


def per_task_table(trajectories: list[Trajectory], top_ops: int = 2) -> list[dict]:
    """One row per task: pass rate, correct op, and the most common first edits."""
    by_task: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_task.setdefault(t.info.task, []).append(t)
    rows = []
    for name, group in by_task.items():
        first_ops = Counter(t.info.ops[0] if t.info.ops else "none" for t in group)
        rows.append({
            "task": name,
            "pass": sum(bool(t.info.success) for t in group) / len(group),
            "correct_op": group[0].info.fix_op,
            "first_edits": dict(first_ops.most_common(top_ops)),
            "episodes": len(group),
        })
    return rows
