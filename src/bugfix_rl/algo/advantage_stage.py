"""The advantage stage of a step, between collating and updating: KL-in-reward shaping when
configured, DAPO's overlong shaping, then the configured group estimator (algo/advantages.py), and
with algo.turn_credit.coef > 0 the per-turn term (algo/turn_credit.py). With algo.mask_infra, episodes
whose reward the infrastructure decided (rollout/env_errors.infrastructure_failure) leave the group
estimator (algo/infra_mask.py) and the loss. Training and preflight both call `advantage_stage`."""

from __future__ import annotations

import torch

from bugfix_rl.algo.advantages import ADVANTAGES
from bugfix_rl.algo.infra_mask import MASKED_ADVANTAGES, kept_episodes, masked_dr_grpo, reward_lost
from bugfix_rl.algo.objective import KL_ESTIMATORS, overlong_penalty
from bugfix_rl.algo.turn_credit import episode_turn_rewards, token_values, turn_advantages, turn_index
from bugfix_rl.algo.update import batch_logprobs
from bugfix_rl.rollout.env_errors import infrastructure_failure


def advantage_stage(batch, trajectories, algo, model, ref_model=None) -> dict:
    """What a step does between collating and updating (preflight runs the same): KL-in-reward
    shaping when configured, then the group advantages and the per-turn term. Returns its dashboard
    metrics."""
    extra = {}
    if algo.kl_coef > 0 and algo.kl_in_reward:
        extra["kl_reward"] = apply_kl_in_reward(batch, model, ref_model, algo)
    valid = trained_episodes(trajectories, algo)
    compute_advantages(batch, trajectories, algo, model.cfg.max_len, valid)
    extra.update(infra_metrics(batch, valid, algo.group_size))
    if algo.turn_credit.coef > 0:  # off: batch.turn_advantages stays None, the loss sees advantages [B]
        kept = None if valid is None else kept_episodes(valid.view(-1, algo.group_size)).reshape(-1)
        extra.update(add_turn_advantages(batch, trajectories, algo, kept))
    return extra


def trained_episodes(trajectories, algo) -> torch.Tensor | None:
    """[B] bool, False where the infrastructure decided the reward (algo.mask_infra); None when every
    episode counts (then nothing below differs from the unmasked arithmetic)."""
    if not algo.mask_infra:
        return None
    valid = torch.tensor([not infrastructure_failure(t.info) for t in trajectories])
    return None if bool(valid.all()) else valid


def compute_advantages(batch, trajectories, algo, model_len: int, valid: torch.Tensor | None = None) -> None:
    """Fill batch.advantages from the rewards (shaped by the overlong penalty), group by group.

    A group whose episodes all got the same task reward (8 failures) carries only the shaping's own
    differences, centred but not divided by their std: divided, length differences of 1-2 tokens
    in an all-fail group would get advantages of +-0.7 to 2.1, the size of a real success.
    valid [B] (trained_episodes): the masked estimator on the valid episodes; the others, and groups
    left with one, get advantage 0 and no policy tokens (batch.mask rows zeroed), so the loss and
    its metrics never see them."""
    rewards = batch.rewards.clone()
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([len(t.ids) for t in trajectories])
        rewards = rewards + overlong_penalty(lengths, model_len, algo.overlong_buffer)
    grouped = rewards.view(-1, algo.group_size)  # [groups, G]
    if valid is None:
        advantages = ADVANTAGES[algo.adv_mode](grouped, algo.adv_eps)
    else:
        kept = kept_episodes(valid.view(-1, algo.group_size))
        advantages = MASKED_ADVANTAGES[algo.adv_mode](grouped, kept, algo.adv_eps)
    if algo.overlong_buffer > 0:
        task = torch.tensor([t.reward for t in trajectories], dtype=grouped.dtype).view(-1, algo.group_size)
        if valid is None:
            no_task_signal = task.amax(1, keepdim=True) == task.amin(1, keepdim=True)  # [groups, 1]
            shaping_only = grouped - grouped.mean(1, keepdim=True)
        else:  # the same on each group's kept episodes; a dropped group keeps its zeros
            no_task_signal = (torch.where(kept, task, -torch.inf).amax(1, keepdim=True)
                              <= torch.where(kept, task, torch.inf).amin(1, keepdim=True))
            shaping_only = masked_dr_grpo(grouped, kept, algo.adv_eps)
        advantages = torch.where(no_task_signal, shaping_only, advantages)
    batch.advantages = advantages.reshape(-1)
    if valid is not None:
        batch.mask[~kept.reshape(-1)] = 0.0  # [B, T-1]: masked episodes carry no policy tokens


def infra_metrics(batch, valid: torch.Tensor | None, group_size: int) -> dict:
    """Dashboard keys of the infrastructure mask: infra_masked (episodes whose reward the infrastructure
    decided), infra_groups_dropped (groups left with fewer than two episodes), infra_share (masked /
    episodes: stop.max_infra_share reads it) and infra_reward_lost (the step's mean reward over the
    valid episodes minus that over all: what the failures cost the step's reward)."""
    if valid is None:
        return {"infra_masked": 0, "infra_groups_dropped": 0, "infra_share": 0.0, "infra_reward_lost": 0.0}
    grouped = valid.view(-1, group_size)
    return {"infra_masked": int((~valid).sum()),
            "infra_groups_dropped": int((grouped.sum(1) < 2).sum()),
            "infra_share": float((~valid).float().mean()),
            "infra_reward_lost": reward_lost(batch.rewards.view(-1, group_size), grouped)}


def add_turn_advantages(batch, trajectories, algo, kept: torch.Tensor | None = None) -> dict:
    """Fill batch.turn_advantages [B, T-1]: coef * the turn advantage of each policy token's turn.

    Turn rewards come from each episode's info: `turn_malformed` (malformed calls per turn, both envs
    record it) and `submitted` (it ended with an answer; an env error is the env's failure, not an
    unanswered episode). kept [B] (the infrastructure mask's, None when nothing was masked): episodes
    outside it leave every turn's baseline. Returns dashboard metrics: the mean turn reward per episode
    and the mean |turn advantage| per policy token."""
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
    if kept is not None:
        exists = exists & kept[:, None]
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
