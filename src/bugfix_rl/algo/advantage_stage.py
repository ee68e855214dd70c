"""The advantage stage of a step, between collating and updating: KL-in-reward shaping when
configured, DAPO's overlong shaping, then the configured group estimator (algo/advantages.py).
Training and preflight both call `advantage_stage`."""

from __future__ import annotations

import torch

from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.algo.objective import KL_ESTIMATORS, overlong_penalty
from bugfix_rl.algo.update import batch_logprobs


def advantage_stage(batch, trajectories, algo, model, ref_model=None) -> dict:
    """What a step does between collating and updating (preflight runs the same): KL-in-reward
    shaping when configured, then the group advantages. Returns its dashboard metrics."""
    extra = {}
    if algo.kl_coef > 0 and algo.kl_in_reward:
        extra["kl_reward"] = apply_kl_in_reward(batch, model, ref_model, algo)
    compute_advantages(batch, trajectories, algo, model.cfg.max_len)
    return extra


def compute_advantages(batch, trajectories, algo, model_len: int) -> None:
    """Fill batch.advantages from the rewards (shaped by the overlong penalty), group by group.

    A group whose episodes all got the same task reward (8 failures) carries only the shaping's own
    differences, centred but not divided by their std: divided, length differences of 1-2 tokens
    in an all-fail group would get advantages of +-0.7 to 2.1, the size of a real success."""
    rewards = batch.rewards.clone()
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([len(t.ids) for t in trajectories])
        rewards = rewards + overlong_penalty(lengths, model_len, algo.overlong_buffer)
    grouped = rewards.view(-1, algo.group_size)  # [groups, G]
    advantages = ADVANTAGES[algo.adv_mode](grouped, algo.adv_eps)
    if algo.overlong_buffer > 0:
        task = torch.tensor([t.reward for t in trajectories], dtype=grouped.dtype).view(-1, algo.group_size)
        no_task_signal = task.amax(1, keepdim=True) == task.amin(1, keepdim=True)  # [groups, 1]
        advantages = torch.where(no_task_signal, grouped - grouped.mean(1, keepdim=True), advantages)
    batch.advantages = advantages.reshape(-1)


def apply_kl_in_reward(batch, model, ref_model, algo) -> float:
    """Reward shaping r - beta * sum_t KL_t (sampler log-probs vs the reference); returns mean KL."""
    with torch.no_grad():
        ref_logp = batch_logprobs(ref_model, batch, algo).logp
    policy = batch.mask > 0  # only where the policy chose the token (where, not * mask: inf * 0 = NaN)
    kl = torch.where(policy, KL_ESTIMATORS[algo.kl_kind](torch.where(policy, batch.old_logp, ref_logp), ref_logp),
                     0.0).sum(1)  # [B]
    batch.rewards = batch.rewards - algo.kl_coef * kl
    return float(kl.mean())
