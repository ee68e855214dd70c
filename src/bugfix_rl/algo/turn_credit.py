"""Per-turn credit (book chapter 7; issue 35): turn-level rewards and their advantages, pure functions.

The outcome advantage (algo/advantages.py) gives every token of an episode the same number, so a
malformed call or a turn that should have been the answer is paid only through the final reward.
Turn credit adds a second term per turn k of an episode:

    r_k  = -malformed_cost * (malformed calls in turn k) - unanswered_cost * [k is the last turn of an
           episode that ended without an answer]
    R_k  = sum_{j >= k} gamma^(j - k) r_j                    (return of the turn rewards from k on)
    A_k  = R_k - b_k,  b_k = mean of R_k over the *other* episodes of the group that have a turn k

and every policy token of turn k gets coef * A_k on top of the outcome advantage
(algo/advantage_stage.py). The baseline uses only other, independently sampled episodes, so nothing
chosen at turn k or later in this episode: E[grad log pi(a_k | h_k) * b_k] = 0. With gamma = 1 the term is
an unbiased estimate of the gradient of coef * E[sum_k r_k] (reward-to-go: a turn is not credited with
the rewards of earlier turns); gamma < 1 is the usual discounted reward-to-go, which trades that for
credit concentrated near the turn. b_k is not state-matched (it does not look at h_k), which costs
variance, not bias; the returns are not divided by their std (that would bias it).

Turns are found in the token stream: a turn is a maximal run of policy tokens (`turn_index`). Every
sampler puts at least one observation token between two turns (the tiny sampler's end-of-observation
token, the chat template's turn tokens), so the runs are the env's turns, in order.
"""

from __future__ import annotations

import torch
from torch import Tensor


def turn_index(mask: Tensor) -> Tensor:
    """Which turn each policy token belongs to.   mask [B, T] (1.0 on policy tokens) -> [B, T] long

    0 for the first run of policy tokens of a row, 1 for the next, ...; -1 off the mask. A row's number
    of turns is `turn_index(mask).amax(1) + 1`.
    """
    policy = mask > 0
    previous = torch.nn.functional.pad(policy[:, :-1], (1, 0), value=False)  # [B, T] policy at t - 1
    starts = policy & ~previous
    return torch.where(policy, starts.long().cumsum(1) - 1, -1)


def episode_turn_rewards(malformed_per_turn: list[int], turns: int, answered: bool, malformed_cost: float,
                         unanswered_cost: float) -> list[float]:
    """The turn rewards r_k of one episode with `turns` turns (len `turns`).

    malformed_per_turn: the env's count of malformed calls per turn (a shorter list counts 0 for the
    missing turns, a longer one is cut to `turns`); answered: the episode ended with an answer.
    """
    rewards = [-malformed_cost * (malformed_per_turn[k] if k < len(malformed_per_turn) else 0)
               for k in range(turns)]
    if turns and not answered:
        rewards[-1] -= unanswered_cost
    return rewards


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """R_k = sum_{j >= k} gamma^(j - k) r_j along the last axis.   [..., K] -> [..., K]

    Turns past an episode's end must hold 0 in `rewards`."""
    K = rewards.shape[-1]
    steps = torch.arange(K)
    exponent = steps[None, :] - steps[:, None]  # [K, K]: j - k
    discount = torch.where(exponent >= 0, torch.tensor(gamma, dtype=rewards.dtype) ** exponent.clamp_min(0), 0.0)
    return rewards @ discount.to(rewards.dtype).T  # [..., K]: R_k = sum_j discount[k, j] r_j


def turn_advantages(rewards: Tensor, exists: Tensor, gamma: float) -> Tensor:
    """A_k = R_k minus the mean R_k of the other group episodes that have a turn k.

    Args:
        rewards: [N, G, K] turn rewards (N groups of G episodes, K turns at most; 0 past an episode's end).
        exists: [N, G, K] bool, True where the episode has turn k.
        gamma: discount of later turns (1: every later turn counts fully; 0: only the turn itself).

    Returns:
        [N, G, K] turn advantages, 0 where `exists` is False. With no other episode at turn k the
        baseline is 0 (A_k = R_k).
    """
    if rewards.dim() != 3 or rewards.shape != exists.shape:
        raise ValueError(f"rewards and exists must both be [N, G, K], got {tuple(rewards.shape)} and "
                         f"{tuple(exists.shape)}")
    present = exists.to(rewards.dtype)
    returns = discounted_returns(rewards * present, gamma) * present  # [N, G, K]
    others_sum = returns.sum(1, keepdim=True) - returns  # [N, G, K]: over the group, leaving this episode out
    others_count = present.sum(1, keepdim=True) - present  # [N, G, K]
    baseline = others_sum / others_count.clamp_min(1.0)  # 0 where no other episode has turn k
    return torch.where(exists, returns - baseline, torch.zeros_like(returns))


def token_values(per_turn: Tensor, turns: Tensor) -> Tensor:
    """Each policy token's value of its turn.   per_turn [B, K], turns [B, T] (turn_index) -> [B, T]

    0 where turns is -1 (not a policy token)."""
    gathered = per_turn.gather(1, turns.clamp_min(0))  # [B, T]
    return torch.where(turns >= 0, gathered, torch.zeros_like(gathered))
