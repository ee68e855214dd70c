"""Policy-gradient objective pieces as pure tensor functions: KL estimators, importance ratios,
the PPO clipped loss, loss aggregation, truncated importance sampling, overlong penalty. (The
entropy of a distribution is policy/entropy.py's: a chat model's own pass takes it too.)

Conventions. A batch holds B sequences. Token tensors are [B, T], T indexing predicted positions
(already aligned: position t holds log pi(ids[t+1] | ids[:t+1])). ``mask`` [B, T] is 1.0 on policy
(sampled) tokens and 0.0 on prompt, observation and padding tokens; every statistic here is taken
over the mask only. Values at masked-out positions may be anything finite.

Registries (KL_ESTIMATORS, RATIOS, AGGREGATIONS) are keyed by the config string, have one signature
per kind, and an unknown key raises KeyError listing the valid ones.

Gradient accumulation. Aggregation weights are computed once on the whole minibatch; a micro-batch
(a subset of rows) contributes ``aggregate(loss[rows], weights[rows])``, and the sum over
micro-batches is exactly the minibatch loss, whatever the split (design review, questions 1-2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from bugfix_rl.registry import Registry

KLEstimator = Callable[[Tensor, Tensor], Tensor]
RatioFn = Callable[[Tensor, Tensor, Tensor], Tensor]
AggregationFn = Callable[[Tensor, float | None], Tensor]


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    """Mean of ``values`` over mask == 1 as a float (0.0 when the mask is empty)."""
    return float((values * mask).sum() / mask.sum().clamp_min(1.0))


# --------------------------------------------------------------------------------------------------
# KL estimators (Schulman, "Approximating KL divergence"). With log r = ref_logp - logp on tokens
# sampled from pi_theta, each estimates KL(pi_theta || pi_ref) elementwise. k1 and k3 are unbiased,
# k3 is nonnegative with lower variance; k2 is biased but close to k3 for small |log r|.


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = -log r.   [...] -> [...]"""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 (log r)^2.   [...] -> [...]"""
    return 0.5 * (ref_logp - logp) ** 2


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = r - 1 - log r (via expm1 for accuracy near r = 1).   [...] -> [...]

    Clamped as verl's low_var_kl: log r to [-20, 20] and k3 to at most 10, so one token that the
    policy has made far less likely than the reference cannot overflow exp() to inf."""
    log_r = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.expm1(log_r) - log_r).clamp(max=10.0)


KL_ESTIMATORS: dict[str, KLEstimator] = Registry(
    "KL estimator", {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
)


# --------------------------------------------------------------------------------------------------
# Importance ratios: fn(logp, old_logp, mask) -> log_ratio [B, T]; the loss uses exp(log_ratio).


def token_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """PPO's per-token log ratio logp - old_logp.   [B, T] -> [B, T] (``mask`` unused)"""
    return logp - old_logp.detach()


def sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO's length-normalised sequence log ratio, token-level straight-through form.

    [B, T] -> [B, T]. Value at every position of row i: s_i = mean over the row's policy tokens of
    (logp - old_logp), so exp(log_ratio) is the geometric mean of the token ratios. Gradient: the
    GSPO-token form s_i,t = sg[s_i] * pi_t / sg[pi_t], i.e. log_ratio = sg[s_i] + logp - sg[logp],
    so d log_ratio[i, t] / d logp[i, t] = 1 and the gradient flows per token. A row without policy
    tokens gets s_i = 0.
    """
    diff = torch.where(mask > 0, logp.detach() - old_logp.detach(), torch.zeros_like(logp))  # [B, T]
    seq_mean = diff.sum(dim=-1, keepdim=True) / mask.sum(dim=-1, keepdim=True).clamp_min(1.0)  # [B, 1]
    return seq_mean + logp - logp.detach()


RATIOS: dict[str, RatioFn] = Registry(
    "ratio", {"token": token_log_ratio, "sequence": sequence_log_ratio}
)


# --------------------------------------------------------------------------------------------------
# PPO clipped surrogate.


def ppo_clip_loss(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token clipped surrogate loss -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A).

    Args:
        log_ratio: [B, T] log(pi_theta / pi_old), e.g. from RATIOS.
        advantages: broadcastable to [B, T]; a [B] tensor is taken as one advantage per sequence, a
            [B, T] one gives each token its own (per-turn credit: Batch.token_advantages).
        mask: [B, T] 1.0 on policy tokens.
        clip_low, clip_high: asymmetric clip range (DAPO "clip-higher": e.g. 0.2 and 0.28).
        dual_clip: c > 1 or None. For A < 0 the loss is capped at -c * A (Ye et al. 2020; verl's
            ``clip_ratio_c``, typically 3), bounding the push from a huge ratio on a bad token.

    Returns:
        loss: [B, T] per-token loss, 0.0 off the mask; aggregate with AGGREGATIONS weights.
        metrics (floats, over policy tokens only):
            clip_frac: fraction where the clipped branch was active (strictly larger loss);
            clip_frac_low / clip_frac_high: the part of clip_frac with r < 1 - clip_low (A < 0) /
                r > 1 + clip_high (A > 0); they sum to clip_frac;
            dual_clip_frac: fraction where the dual-clip cap bound (0.0 without dual clip);
            approx_kl: mean k3 estimate of KL(pi_old || pi_theta), i.e. r - 1 - log r with
                r = exp(log_ratio) (nonnegative; same as cleanrl's approx_kl).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # [B] -> [B, 1]
    # Zero off the mask first: an overflowing exp at padding would put NaN into the gradient.
    log_ratio = torch.where(mask > 0, log_ratio, torch.zeros_like(log_ratio))
    ratio = torch.exp(log_ratio)  # [B, T]
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    unclipped_loss = -advantages * ratio
    clipped_loss = -advantages * clipped_ratio
    loss = torch.maximum(unclipped_loss, clipped_loss)  # [B, T]
    clipped_active = clipped_loss > unclipped_loss  # [B, T]

    dual_active = torch.zeros_like(clipped_active)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        cap = -advantages * dual_clip
        dual_active = (advantages < 0) & (loss > cap)
        loss = torch.where(dual_active, cap, loss)
    loss = torch.where(mask > 0, loss, torch.zeros_like(loss))

    with torch.no_grad():
        detached_log_ratio = log_ratio.detach()
        metrics = {
            "clip_frac": _masked_mean(clipped_active.float(), mask),
            "clip_frac_low": _masked_mean((clipped_active & (ratio < 1.0 - clip_low)).float(), mask),
            "clip_frac_high": _masked_mean((clipped_active & (ratio > 1.0 + clip_high)).float(), mask),
            "dual_clip_frac": _masked_mean(dual_active.float(), mask),
            "approx_kl": _masked_mean(torch.expm1(detached_log_ratio) - detached_log_ratio, mask),
        }
    return loss, metrics


# --------------------------------------------------------------------------------------------------
# Aggregation: fn(mask, norm_const) -> per-token weights [B, T], computed once per minibatch.
# "num_seqs" counts only sequences with at least one policy token, so an empty (e.g. fully masked
# or filtered) row neither contributes nor dilutes the others. ``norm_const`` is read only by the
# "norm_const" mode. Weights are 0.0 off the mask.


def _num_seqs(mask: Tensor) -> Tensor:
    """[B, T] -> [] number of rows with at least one policy token (at least 1, in mask dtype)."""
    return (mask.sum(dim=-1) > 0).sum().clamp_min(1).to(mask.dtype)


def token_mean_weights(mask: Tensor, norm_const: float | None) -> Tensor:
    """1 / (total policy tokens in the minibatch) per policy token.   [B, T] -> [B, T]"""
    return mask / mask.sum().clamp_min(1.0)


def seq_mean_token_mean_weights(mask: Tensor, norm_const: float | None) -> Tensor:
    """1 / (L_i * num_seqs): every sequence counts equally, long ones weaker per token.   [B, T] -> [B, T]"""
    lengths = mask.sum(dim=-1, keepdim=True).clamp_min(1.0)  # [B, 1]
    return mask / (lengths * _num_seqs(mask))


def seq_mean_token_sum_weights(mask: Tensor, norm_const: float | None) -> Tensor:
    """1 / num_seqs per policy token (token sum per sequence, mean over sequences).   [B, T] -> [B, T]"""
    return mask / _num_seqs(mask)


def norm_const_weights(mask: Tensor, norm_const: float | None) -> Tensor:
    """1 / norm_const per policy token (Dr. GRPO uses B * L_max): independent of the batch's
    lengths, so invariant to any micro-batch split by construction.   [B, T] -> [B, T]"""
    if norm_const is None or norm_const <= 0:
        raise ValueError(f"aggregation 'norm_const' needs a positive norm_const, got {norm_const}")
    return mask / norm_const


AGGREGATIONS: dict[str, AggregationFn] = Registry(
    "aggregation",
    {
        "token_mean": token_mean_weights,
        "seq_mean_token_mean": seq_mean_token_mean_weights,
        "seq_mean_token_sum": seq_mean_token_sum_weights,
        "norm_const": norm_const_weights,
    },
)


def aggregate(per_token_loss: Tensor, weights: Tensor) -> Tensor:
    """Scalar loss sum(per_token_loss * weights).   [B, T], [B, T] -> []

    Pass the rows of a micro-batch from both tensors; summing over micro-batches gives the minibatch
    loss exactly.
    """
    return (per_token_loss * weights).sum()


# --------------------------------------------------------------------------------------------------
# Truncated importance sampling (sampler/trainer mismatch and staleness; design review question 16).


_TIS_LEVELS = ("sequence", "token")


def truncated_is_weights(
    logp_prox: Tensor, logp_sampler: Tensor, mask: Tensor, cap: float, level: str
) -> tuple[Tensor, float]:
    """Truncated importance weights min(pi_prox / mu, cap) correcting for the sampler mu.

    Args:
        logp_prox: [B, T] log-probs of the sampled tokens under the proximal policy (the trainer's
            pi_old, the one PPO clips against).
        logp_sampler: [B, T] log-probs the inference engine reported when sampling (mu).
        mask: [B, T] 1.0 on policy tokens.
        cap: C > 0, e.g. 2.
        level: "token": w_t = min(exp(logp_prox_t - logp_sampler_t), C) per token.
            "sequence": w = min(prod_t pi_prox_t / mu_t, C), the product of the token ratios over
            the row's policy tokens (sum of log ratios), broadcast to those tokens. Unbiased for the
            whole prefix shift but its variance grows with length.

    Returns:
        weights: [B, T] detached, 0.0 off the mask; multiply into the per-token loss.
        truncated_fraction: fraction of policy tokens ("token") or of sequences with at least one
            policy token ("sequence") where the ratio exceeded the cap; watch it as staleness grows.
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if level not in _TIS_LEVELS:
        raise ValueError(f"unknown TIS level {level!r}; valid: {', '.join(_TIS_LEVELS)}")
    with torch.no_grad():
        log_ratio = torch.where(mask > 0, logp_prox - logp_sampler, torch.zeros_like(logp_prox))
        if level == "sequence":
            log_ratio = log_ratio.sum(dim=-1, keepdim=True)  # [B, 1]; log-space, no overflow
            counted = mask.sum(dim=-1, keepdim=True) > 0  # [B, 1]
        else:
            counted = mask > 0  # [B, T]
        truncated = (log_ratio > math.log(cap)) & counted
        weights = torch.exp(log_ratio.clamp(max=math.log(cap))) * mask  # [B, T]
        fraction = float(truncated.sum() / counted.sum().clamp_min(1))
    return weights, fraction


# --------------------------------------------------------------------------------------------------
# Sampler-trainer mismatch (design review questions 16 and 17) and the loss mask's diagnostics (q28).


def kl_sampler_proximal(log_ratio: Tensor) -> float:
    """KL(mu || pi_prox) per policy token, from log_ratio = log pi_prox - log mu at tokens drawn from
    the sampler mu: the mean of k3 = r - 1 - log r, r = pi_prox / mu (unbiased under mu, >= 0).
    [N] (the policy tokens measured, flat) -> float; 0.0 with no token."""
    if not log_ratio.numel():
        return 0.0
    log_ratio = log_ratio.double()
    return float((torch.expm1(log_ratio) - log_ratio).mean())


def trajectory_gap_kept(logp_prox: Tensor, logp_sampler: Tensor, mask: Tensor, bound: float) -> Tensor:
    """The per-trajectory gap filter: True for each row whose largest |log pi_prox - log mu| over its
    policy tokens is at most `bound` (a row without policy tokens is kept).   [B, T] x3 -> [B] bool"""
    gap = torch.where(mask > 0, (logp_prox - logp_sampler).abs(), torch.zeros_like(logp_prox))
    return gap.amax(dim=-1) <= bound


def real_positions(mask: Tensor, lengths: Tensor) -> Tensor:
    """[B, T] bool: the predicted positions inside each row (t < length - 1), padding excluded."""
    return torch.arange(mask.shape[-1], device=mask.device)[None, :] < (lengths - 1)[:, None]


def mask_share(mask: Tensor, lengths: Tensor) -> float:
    """The share of a batch's real predicted positions that are policy tokens (the loss's mask); the
    rest are prompt and observation tokens.   mask [B, T], lengths [B] (Batch.lengths) -> float"""
    real = real_positions(mask, lengths)
    return float(((mask > 0) & real).sum() / real.sum().clamp_min(1))


def observation_positions(mask: Tensor, lengths: Tensor) -> Tensor:
    """[B, T] bool: real predicted positions that are not policy tokens (the prompt and observations)."""
    return real_positions(mask, lengths) & (mask <= 0)


# --------------------------------------------------------------------------------------------------
# DAPO overlong penalty.


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, penalty: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment, added to the reward.   [B] -> [B] float

    0 for lengths <= max_len - buffer, then linear down to -penalty at max_len, -penalty beyond.
    """
    if not 0 < buffer <= max_len:
        raise ValueError(f"need 0 < buffer <= max_len, got buffer={buffer}, max_len={max_len}")
    if not lengths.is_floating_point():
        lengths = lengths.to(torch.get_default_dtype())
    excess = (lengths - (max_len - buffer)) / buffer
    return -penalty * excess.clamp(0.0, 1.0)
