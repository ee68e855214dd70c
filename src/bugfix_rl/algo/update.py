"""The policy update: PPO-clipped steps over minibatches and epochs, with gradient accumulation.

Everything algorithm-specific is looked up in a registry (ratio, aggregation, KL estimator); the
update never branches on an algorithm's name. The aggregation weights are computed once per
minibatch, so splitting a minibatch into micro-batches leaves the gradient unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bugfix_rl.algo.objective import (AGGREGATIONS, KL_ESTIMATORS, RATIOS, aggregate, entropy_from_logits,
                                      ppo_clip_loss, truncated_is_weights)
from bugfix_rl.rollout.trajectory import Batch


@dataclass
class LogProbs:
    """Per-position outputs of one trainer forward, aligned with ids[:, 1:].

    logp: [B, T-1] log-prob of the next token (differentiable); entropy: [B, T-1] (detached unless
    asked for gradients).
    """

    logp: torch.Tensor
    entropy: torch.Tensor


def token_logprobs(model, ids: torch.Tensor, temperature: float, with_entropy_grad: bool = False) -> LogProbs:
    """The trainer's log pi(ids[t+1] | ids[:t+1]) at the sampler's temperature.   ids [B, T]"""
    logits = model(ids)[:, :-1] / temperature  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
    if with_entropy_grad:
        entropy = entropy_from_logits(logits)
    else:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return LogProbs(logp, entropy)


def micro_batches(batch: Batch, size: int):
    """Row slices of `batch` of at most `size` rows (size 0: the whole batch)."""
    if size <= 0 or size >= len(batch):
        yield slice(0, len(batch))
        return
    for start in range(0, len(batch), size):
        yield slice(start, start + size)


def minibatch_loss(model, mb: Batch, weights: torch.Tensor, algo, ref_model=None):
    """Loss of one (micro-)batch, already weighted for its minibatch; plus detached statistics."""
    out = token_logprobs(model, mb.ids, algo.temperature, with_entropy_grad=algo.entropy_coef > 0)
    mask = mb.mask
    weights = weights[:, : mask.shape[1]]  # the micro-batch is trimmed to its own longest row
    log_ratio = RATIOS[algo.ratio_level](out.logp, mb.old_logp, mask)
    per_token, stats = ppo_clip_loss(log_ratio, mb.advantages, mask, algo.clip_low, algo.clip_high,
                                     algo.dual_clip)
    if algo.kl_coef > 0 and not algo.kl_in_reward:
        with torch.no_grad():
            ref_logp = token_logprobs(ref_model, mb.ids, algo.temperature).logp
        kl = KL_ESTIMATORS[algo.kl_kind](out.logp, ref_logp)
        per_token = per_token + algo.kl_coef * kl
        stats["kl_ref"] = float((kl.detach() * mask).sum() / mask.sum().clamp_min(1))
    if algo.entropy_coef > 0:
        per_token = per_token - algo.entropy_coef * out.entropy
    loss = aggregate(per_token * mask, weights)
    n_tokens = mask.sum().clamp_min(1)
    stats["entropy"] = float((out.entropy.detach() * mask).sum() / n_tokens)
    gap = (out.logp.detach() - mb.old_logp).abs() * mask
    stats["logp_gap"] = float(gap.max()) if mask.any() else 0.0
    stats["tokens"] = float(mask.sum())
    return loss, stats


def policy_update(model, optimizer, batch: Batch, algo, generator: torch.Generator, ref_model=None) -> dict:
    """Epochs x minibatches of clipped updates on `batch` (advantages filled). Returns step metrics.

    old_logp are the sampler's log-probs, so the ratio is exactly 1 at the first minibatch; the
    sampler-trainer gap is read there, before any parameter changed.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    sums: dict[str, float] = {}
    token_total, first = 0.0, None
    grad_norms = []
    for _epoch in range(algo.epochs):
        order = torch.randperm(len(batch), generator=generator)
        for rows in order.chunk(algo.minibatches):
            mb = batch.rows(rows)
            weights = AGGREGATIONS[algo.loss_mode](mb.mask, algo.norm_const)
            if algo.tis_cap is not None:
                # old_logp (the sampler's mu) vs the current proximal policy before this minibatch
                with torch.no_grad():
                    prox = token_logprobs(model, mb.ids, algo.temperature).logp
                tis, truncated = truncated_is_weights(prox, mb.old_logp, mb.mask, algo.tis_cap, algo.tis_level)
                weights = weights * tis
                sums["tis_truncated_frac"] = sums.get("tis_truncated_frac", 0.0) + truncated
            optimizer.zero_grad(set_to_none=True)
            for part in micro_batches(mb, algo.micro_batch_size):
                loss, stats = minibatch_loss(model, mb.rows(part), weights[part], algo, ref_model)
                loss.backward()
                if first is None:
                    first = {"logp_gap": stats["logp_gap"]}
                for key, value in stats.items():
                    if key != "logp_gap":
                        sums[key] = sums.get(key, 0.0) + value * (stats["tokens"] if key != "tokens" else 1)
                token_total += stats["tokens"]
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, algo.max_grad_norm)))
            optimizer.step()
    metrics = {k: v / max(token_total, 1.0) for k, v in sums.items() if k not in ("tokens", "tis_truncated_frac")}
    if "tis_truncated_frac" in sums:
        metrics["tis_truncated_frac"] = sums["tis_truncated_frac"] / (algo.epochs * algo.minibatches)
    metrics["grad_norm"] = sum(grad_norms) / len(grad_norms)
    metrics.update(first or {"logp_gap": 0.0})
    return metrics
