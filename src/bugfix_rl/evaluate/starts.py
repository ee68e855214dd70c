"""`bugfix-rl starts`: what RL can start from (the book's §19.2), measured for several starting policies.

GRPO learns only from groups whose rewards differ, so a starting policy is judged before any RL by:
whether successes appear among its samples (pass@1 and pass@8 on the training tasks), the share of
groups of `group_size` that carry a gradient, its entropy on policy tokens (exploration), and its
behaviour (reads per episode, first edit right). Each policy is sampled on the same seeded streams.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bugfix_rl.algo.update import token_logprobs
from bugfix_rl.evaluate.evaluate import behaviour_stats, sample_counts
from bugfix_rl.evaluate.intervals import task_mean_interval
from bugfix_rl.evaluate.stats import pass_at_k
from bugfix_rl.gym.tasks import make_tasks
from bugfix_rl.rollout.collect import sample_groups
from bugfix_rl.types import collate


@dataclass
class StartProfile:
    """One starting policy's numbers; pass rates with their Wilson interval over the training tasks."""

    name: str
    pass_at_1: tuple[float, float, float]  # (value, lo, hi)
    pass_at_8: tuple[float, float, float]
    informative_groups: float  # share of groups with a non-zero reward spread
    entropy: float  # mean over policy tokens, nats, at the sampling temperature
    reads: float  # per episode
    first_edit_right: float
    tasks: int
    episodes: int  # per task, for pass@k


def profile_policy(name: str, model, tokenizer, make_env, temperature: float, n: int, group_size: int,
                   seed: int) -> StartProfile:
    """Sample `n` episodes per training task (pass@k) and one group of `group_size` per task (groups,
    entropy, behaviour), from generators seeded with `seed` and `seed + 1`."""
    tasks = make_tasks("train")
    counts = sample_counts(model, tokenizer, tasks, n, make_env, temperature, seed)  # [T]
    groups = sample_groups(model, tokenizer, tasks, group_size, make_env, temperature,
                           torch.Generator().manual_seed(seed + 1))
    rewards = torch.tensor([t.reward for t in groups], dtype=torch.float64).view(len(tasks), group_size)
    batch = collate(groups, tokenizer.pad_id)
    with torch.no_grad():
        entropy = token_logprobs(model, batch.ids, temperature, mask=batch.mask, allowed=batch.allowed).entropy  # [B, T-1]
    stats = behaviour_stats(groups)
    pass1 = task_mean_interval(counts.to(torch.float64) / n)
    pass8 = task_mean_interval(pass_at_k(n, counts, min(8, n)))
    return StartProfile(name, tuple(float(v) for v in pass1), tuple(float(v) for v in pass8),
                        float((rewards.std(-1) > 0).double().mean()),
                        float((entropy * batch.mask).sum() / batch.mask.sum().clamp(min=1)),
                        stats["reads"], stats["first_edit_right"], len(tasks), n)


HEADER = ["starting policy", "train pass@1 [95% CI]", "train pass@8 [95% CI]", "informative groups", "entropy (nats)",
          "reads / episode", "first edit right"]


def profile_cells(p: StartProfile) -> list[str]:
    def ci(v):
        return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"

    return [p.name, ci(p.pass_at_1), ci(p.pass_at_8), f"{p.informative_groups:.2f}", f"{p.entropy:.3f}",
            f"{p.reads:.2f}", f"{p.first_edit_right:.2f}"]


def profiles_markdown(profiles: list[StartProfile]) -> list[str]:
    return (["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
            + ["| " + " | ".join(profile_cells(p)) + " |" for p in profiles])
