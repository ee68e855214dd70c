"""Group-relative advantage estimators (critic-free): one scalar per episode.

Every estimator has the same signature, ``fn(rewards, eps) -> advantages``, with rewards laid out as
[num_groups, group_size] (G episodes of the same task per row), so the trainer looks one up by its
config string and never branches on the name. The advantage of an episode is later broadcast to all
of its policy tokens by the loss (``objective.ppo_clip_loss`` accepts [B] or [B, 1]).

Degenerate groups (all rewards equal, e.g. 8 failures) get exactly zero advantage in every
estimator, also with ``eps=0``: no NaN, and no tiny nonzero residue from float rounding of the mean.

Every token of an episode gets the episode's outcome advantage from here. Per-turn credit is a separate
term added on top (algo/turn_credit.py, ``algo.turn_credit``, off by default): turn-level rewards
(malformed calls, an episode that ended without an answer) whose return from turn t on is baselined
by the same turn of the other group episodes, so nothing chosen at turn t or later enters the baseline
(docs/ALGORITHMS.md, "Per-turn credit").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bugfix_rl.registry import Registry

AdvantageFn = Callable[[Tensor, float], Tensor]


def _group_centered(rewards: Tensor) -> Tensor:
    """[N, G] -> [N, G] rewards minus their group mean; exactly 0 in degenerate groups."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [num_groups, group_size], got {tuple(rewards.shape)}")
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    degenerate = rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)  # [N, 1]
    return centered.masked_fill(degenerate, 0.0)


def _divide(centered: Tensor, scale: Tensor, eps: float) -> Tensor:
    """centered / (scale + eps); where scale is 0 the numerator is exactly 0, so the result is 0."""
    return centered / (scale + eps).clamp_min(torch.finfo(centered.dtype).tiny)


def grpo(rewards: Tensor, eps: float) -> Tensor:
    """(r - group mean) / (group population std + eps).   [N, G] -> [N, G]

    Population std (unbiased=False): one success in a group of 8 gives sqrt(7) to the success and
    -1/sqrt(7) to each failure. The division scales a group by 1/sqrt(p(1-p)) for success rate p,
    i.e. up-weights near-always-failing and near-always-passing tasks (the difficulty weighting
    Dr. GRPO criticises); use ``dr_grpo`` or ``rloo`` when rewards are noisy.
    """
    centered = _group_centered(rewards)
    return _divide(centered, rewards.std(dim=1, unbiased=False, keepdim=True), eps)


def dr_grpo(rewards: Tensor, eps: float) -> Tensor:
    """r - group mean (Dr. GRPO: no std division; ``eps`` unused).   [N, G] -> [N, G]

    One success in 8: 0.875 for the success, -0.125 for each failure.
    """
    return _group_centered(rewards)


def rloo(rewards: Tensor, eps: float) -> Tensor:
    """Leave-one-out baseline: r_i - mean of the other G-1 rewards (``eps`` unused).   [N, G] -> [N, G]

    Equals G/(G-1) * (r_i - group mean). One success in 8: 1 for the success, -1/7 for each failure.
    """
    group_size = rewards.shape[-1]
    if group_size < 2:
        raise ValueError(f"rloo needs group_size >= 2, got {group_size}")
    return _group_centered(rewards) * (group_size / (group_size - 1))


def reinforce_pp(rewards: Tensor, eps: float) -> Tensor:
    """REINFORCE++-baseline: (r - group mean) / (std over the whole batch + eps).   [N, G] -> [N, G]

    Departure from verl's ``reinforce_plus_plus_baseline``: verl whitens over *tokens* with a
    Bessel-corrected variance (long episodes count more); here the std is the population std over
    the N*G *episodes*, since this signature carries no lengths. The batch mean of the group-centered
    rewards is zero by construction, so only the division remains of the whitening.
    """
    centered = _group_centered(rewards)
    return _divide(centered, centered.std(unbiased=False), eps)


ADVANTAGES: dict[str, AdvantageFn] = Registry(
    "advantage estimator",
    {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo, "reinforce_pp": reinforce_pp},
)


def compute_advantages(name: str, rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """Look up ``name`` in ADVANTAGES and apply it.   rewards [N, G] -> advantages [N, G]

    Raises KeyError listing the valid names for an unknown ``name``.
    """
    return ADVANTAGES[name](rewards, eps)
