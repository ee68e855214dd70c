"""Masked group advantages: episodes whose reward the infrastructure decided leave the group.

An episode whose grading ended `sandbox_error`, or whose env raised (`env_error`), scores 0 for a
reason the policy did not cause (rollout/env_errors.infrastructure_failure names the cause). Scored
as a real 0 it lowers its group's baseline and pushes the policy away from whatever that episode did.
Here it leaves the group instead: the group mean, std and leave-one-out count are those of the
remaining episodes, its own advantage is 0, and a group left with fewer than two episodes drops out
(every advantage 0: one episode has no baseline).

The estimators are those of algo/advantages.py on the remaining episodes, in closed form with a mask,
so that a masked group's advantages equal the unmasked estimator's on the same group with the failed
episodes removed (tests/test_infra_mask.py checks that equality and hand-computed numbers):

    n = valid episodes of the group, mu = their mean, c_i = r_i - mu (0 when they all agree)
    grpo:         c_i / (sqrt(sum c^2 / n) + eps)
    dr_grpo:      c_i
    rloo:         c_i * n / (n - 1)
    reinforce_pp: c_i / (population std of c over every valid episode of the kept groups + eps)

Unbiasedness, the reason it is worth doing: if failures strike independently of what the episode did
(a lost server does not read the code), the remaining episodes are a random subsample of the group, so
the baseline and the policy-gradient estimate are those of a smaller group, not of a biased one. A
failure that depends on the code (a submission that crashes the grader's server) would break this;
the sandbox declares `sandbox_error` only for failures before any model code ran or a lost server
(sandbox/sandbox.py), and the lost-server case is the one that could correlate.

Nothing here is used when no episode failed: the trainer keeps algo/advantages.py's arithmetic then.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bugfix_rl.registry import Registry

MaskedAdvantageFn = Callable[[Tensor, Tensor, float], Tensor]


def kept_episodes(valid: Tensor) -> Tensor:
    """[N, G] bool -> [N, G] bool: the valid episodes of groups that keep at least two of them."""
    return valid & (valid.sum(dim=1, keepdim=True) >= 2)


def _masked_centered(rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(centered [N, G], kept [N, G], n [N, 1]): rewards minus the mean of the kept episodes of their
    group, 0 at every other episode and in groups whose kept rewards all agree."""
    if rewards.dim() != 2 or rewards.shape != valid.shape:
        raise ValueError(f"rewards and valid must both be [num_groups, group_size], got "
                         f"{tuple(rewards.shape)} and {tuple(valid.shape)}")
    kept = kept_episodes(valid.bool())
    n = kept.sum(dim=1, keepdim=True).to(rewards.dtype)  # [N, 1]
    mean = torch.where(kept, rewards, 0.0).sum(dim=1, keepdim=True) / n.clamp_min(1)
    high = torch.where(kept, rewards, -torch.inf).amax(dim=1, keepdim=True)
    low = torch.where(kept, rewards, torch.inf).amin(dim=1, keepdim=True)
    informative = kept & (high > low)  # [N, G]; a dropped group has high = -inf, low = inf
    return torch.where(informative, rewards - mean, 0.0), kept, n


def _divide(centered: Tensor, scale: Tensor, eps: float) -> Tensor:
    return centered / (scale + eps).clamp_min(torch.finfo(centered.dtype).tiny)


def masked_grpo(rewards: Tensor, valid: Tensor, eps: float) -> Tensor:
    """grpo on each group's kept episodes: (r - mean) / (population std + eps).   [N, G] -> [N, G]"""
    centered, _, n = _masked_centered(rewards, valid)
    std = (centered.square().sum(dim=1, keepdim=True) / n.clamp_min(1)).sqrt()
    return _divide(centered, std, eps)


def masked_dr_grpo(rewards: Tensor, valid: Tensor, eps: float) -> Tensor:
    """dr_grpo on each group's kept episodes: r - mean.   [N, G] -> [N, G]"""
    return _masked_centered(rewards, valid)[0]


def masked_rloo(rewards: Tensor, valid: Tensor, eps: float) -> Tensor:
    """rloo on each group's kept episodes: n/(n-1) (r - mean), n the kept count.   [N, G] -> [N, G]"""
    centered, _, n = _masked_centered(rewards, valid)
    return centered * (n / (n - 1).clamp_min(1))


def masked_reinforce_pp(rewards: Tensor, valid: Tensor, eps: float) -> Tensor:
    """reinforce_pp on the kept episodes: (r - group mean) / (std over every kept episode + eps)."""
    centered, kept, _ = _masked_centered(rewards, valid)
    count = kept.sum().clamp_min(1)
    batch_mean = centered.sum() / count
    std = (torch.where(kept, centered - batch_mean, 0.0).square().sum() / count).sqrt()
    return _divide(centered, std, eps)


MASKED_ADVANTAGES: dict[str, MaskedAdvantageFn] = Registry(
    "advantage estimator",
    {"grpo": masked_grpo, "dr_grpo": masked_dr_grpo, "rloo": masked_rloo, "reinforce_pp": masked_reinforce_pp},
)


def reward_lost(rewards: Tensor, valid: Tensor) -> float:
    """What the failed episodes cost the step's mean reward: mean over the valid episodes minus the mean
    over all (0 when none failed or none is valid).   rewards, valid [N, G]"""
    valid = valid.bool()
    if bool(valid.all()) or not bool(valid.any()):
        return 0.0
    return float(rewards[valid].mean() - rewards.mean())
