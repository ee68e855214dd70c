"""The advantage stage of a step, between collating and updating: KL-in-reward shaping when
configured, DAPO's overlong shaping, then the configured group estimator (algo/advantages.py), and
with algo.turn_credit.coef > 0 the per-turn term (algo/turn_credit.py). Training and preflight both
call `advantage_stage`."""

from __future__ import annotations

import torch

from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.algo.objective import KL_ESTIMATORS, overlong_penalty
from bugfix_rl.algo.turn_credit import episode_turn_rewards, token_values, turn_advantages, turn_index
from bugfix_rl.algo.update import batch_logprobs


def advantage_stage(batch, trajectories, algo, model, ref_model=None) -> dict:
    """What a step does between collating and updating (preflight runs the same): KL-in-reward
    shaping when configured, then the group advantages and the per-turn term. Returns its dashboard
    metrics."""
    extra = {}
    if algo.kl_coef > 0 and algo.kl_in_reward:
        extra["kl_reward"] = apply_kl_in_reward(batch, model, ref_model, algo)
    compute_advantages(batch, trajectories, algo, model.cfg.max_len)
    if algo.turn_credit.coef > 0:  # off: batch.turn_advantages stays None, the loss sees advantages [B]
        extra.update(add_turn_advantages(batch, trajectories, algo))
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


def add_turn_advantages(batch, trajectories, algo) -> dict:
    """Fill batch.turn_advantages [B, T-1]: coef * the turn advantage of each policy token's turn.

    Turn rewards come from each episode's info: `turn_malformed` (malformed calls per turn, both envs
    record it) and `submitted` (it ended with an answer; an env error is the env's failure, not an
    unanswered episode). Returns dashboard metrics: the mean turn reward per episode and the mean
    |turn advantage| per policy token."""
    cfg = algo.turn_credit
    turns = turn_index(batch.mask)  # [B, T-1]
    counts = (turns.amax(1) + 1).tolist()  # [B] turns per episode
    K = max(max(counts), 1)
    rewards = torch.zeros(len(batch), K)
    for row, (trajectory, n) in enumerate(zip(trajectories, counts)):
        info = trajectory.info
        answered = bool(info.submitted) or bool(info.env_error)
        rewards[row, :n] = torch.tensor(episode_turn_rewards(list(info.turn_malformed), n, answered,
                                                             cfg.malformed_cost, cfg.unanswered_cost))
    exists = torch.arange(K)[None, :] < torch.tensor(counts)[:, None]  # [B, K]
    shape = (-1, algo.group_size, K)  # rows are group-contiguous, as in compute_advantages
    per_turn = turn_advantages(rewards.view(shape), exists.view(shape), cfg.gamma).reshape(len(batch), K)
    batch.turn_advantages = cfg.coef * token_values(per_turn, turns)  # [B, T-1], 0 off the mask
    policy = batch.mask > 0
    return {"turn_reward": float(rewards.sum(1).mean()),
            "turn_adv_abs": float(batch.turn_advantages[policy].abs().mean()) if policy.any() else 0.0}


def apply_kl_in_reward(batch, model, ref_model, algo) -> float:
    """Reward shaping r - beta * sum_t KL_t (sampler log-probs vs the reference); returns mean KL."""
    with torch.no_grad():
        ref_logp = batch_logprobs(ref_model, batch, algo).logp
    policy = batch.mask > 0  # only where the policy chose the token (where, not * mask: inf * 0 = NaN)
    kl = torch.where(policy, KL_ESTIMATORS[algo.kl_kind](torch.where(policy, batch.old_logp, ref_logp), ref_logp),
                     0.0).sum(1)  # [B]
    batch.rewards = batch.rewards - algo.kl_coef * kl
    return float(kl.mean())
