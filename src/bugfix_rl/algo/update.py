"""The policy update: PPO-clipped steps over minibatches and epochs, with gradient accumulation.

Everything algorithm-specific is looked up in a registry (ratio, aggregation, KL estimator); the
update never branches on an algorithm's name. The aggregation weights are computed once per
minibatch, so splitting a minibatch into micro-batches leaves the gradient unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from bugfix_rl.algo.data_parallel import SingleProcess
from bugfix_rl.algo.objective import (AGGREGATIONS, KL_ESTIMATORS, RATIOS, aggregate, kl_sampler_proximal,
                                      mask_share, observation_positions, ppo_clip_loss, trajectory_gap_kept,
                                      truncated_is_weights)
from bugfix_rl.algo.packing import packed_logits
from bugfix_rl.policy.entropy import entropy_from_logits
from bugfix_rl.policy.guided_edits import hold_to_allowed
from bugfix_rl.types import Batch, LogProbs


def token_logprobs(model, ids: torch.Tensor, temperature: float, with_entropy_grad: bool = False,
                   mask: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
                   allowed: torch.Tensor | None = None) -> LogProbs:
    """The trainer's log pi(ids[t+1] | ids[:t+1]) at the sampler's temperature.   ids [B, T]

    mask [B, T-1] (optional) marks the positions whose values are needed. A model with its own
    `token_logprobs(ids, temperature, mask, with_entropy_grad)` (a chat model, policy/qwen3.py: LM head
    at those positions only) computes them itself, with 0 elsewhere. lengths [B] (optional, each row's
    real length: Batch.lengths): a model that `takes_packed_rows` then runs on the rows packed end to
    end (algo/packing.py), the same values without the padding's work; past a row's length the values
    are meaningless, as they are on padding. allowed [B, T-1, K] (optional, Batch.allowed): guided
    decoding's allowed ids, over which the log-softmax and the entropy are renormalised as the sampler's
    were (policy/guided_edits.hold_to_allowed)."""
    if hasattr(model, "token_logprobs"):
        if allowed is not None:
            raise ValueError("guided decoding (env.guide_old_string) is the word sampler's: a chat model has no guide")
        return model.token_logprobs(ids, temperature, mask, with_entropy_grad)
    left_out = 0 if allowed is not None else slot_columns_left_out(model, ids, temperature, with_entropy_grad)
    options = {"words_only": True} if left_out else {}  # the model computes the words' columns alone
    if lengths is not None and getattr(getattr(model, "module", model), "takes_packed_rows", False):  # DDP: .module
        logits = packed_logits(model, ids, lengths, **options)  # [B, T, V - left_out]
    else:
        logits = model(ids, **options)  # [B, T, V - left_out]
    logits = logits[:, :-1] / temperature  # [B, T-1, V - left_out]
    if allowed is not None:
        logits = hold_to_allowed(logits, allowed)  # -inf outside the guided positions' allowed ids
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1)
    if with_entropy_grad:
        entropy = entropy_from_logits(logits)
    else:
        with torch.no_grad():
            finite = logp_all if allowed is None else logp_all.masked_fill(torch.isneginf(logp_all), 0.0)
            terms = logp_all.exp() * finite  # [B, T-1, V - left_out]; an id guiding held out adds 0, not 0 * -inf
            if left_out:  # a left-out slot's term is exp(-1e4 - ...) * (-1e4 - ...) = -0.0: summed with
                # them, the sum adds in the order of the full width's, so the entropy is the same float
                terms = F.pad(terms, (0, left_out), value=-0.0)
            entropy = -terms.sum(-1)
    return LogProbs(logp, entropy)


def slot_columns_left_out(model, ids: torch.Tensor, temperature: float, with_entropy_grad: bool) -> int:
    """How many of the vocabulary's last columns token_logprobs leaves out of its log-softmax: a
    TinyAgent's out-of-vocabulary slots, when it has no copy head (policy/tiny.py).

    Without a copy head a slot's logit is SLOT_LOGIT (-1e4), whose probability underflows to exactly 0
    at a temperature up to 10 (-1e4 / 10 lies far below any word's logit), so over the words alone
    every word's log-prob is the same float, as are its gradients when each position's gradient comes
    from one token's log-prob. A 256-slot capstone model then computes 235 columns instead of 491 in
    the head (the model's forward with words_only), the log-softmax and both their backward passes.
    Not when a slot id occurs in ids (its own log-prob needs the full width), nor when the entropy
    takes a gradient (its backward sums over the full width, and the order of those sums sets the
    last bits).
    tests/test_update_math.py checks the values and gradients against the full width's, bit for bit."""
    inner = getattr(model, "module", model)  # DDP
    slots = getattr(inner, "oov_slots", 0)
    if not slots or with_entropy_grad or getattr(inner, "copy", None) is not None or not 0 < temperature <= 10:
        return 0
    return 0 if bool((ids >= inner.vocab_size - slots).any()) else slots


def packing_lengths(batch: Batch, algo) -> torch.Tensor | None:
    """The rows' lengths for token_logprobs when algo.pack_rows packs them, else None (padded rows)."""
    return batch.lengths() if algo.pack_rows else None


def batch_logprobs(model, batch: Batch, algo, temperature: float | None = None) -> LogProbs:
    """token_logprobs of a whole batch as the update computes them (packed when algo.pack_rows), at
    `temperature` (default: algo's); no entropy gradient."""
    temperature = algo.temperature if temperature is None else temperature
    return token_logprobs(model, batch.ids, temperature, mask=batch.mask, lengths=packing_lengths(batch, algo),
                          allowed=batch.allowed)


def minibatch_loss(model, mb: Batch, weights: torch.Tensor, algo, ref_model=None, is_weights=None):
    """Loss of one (micro-)batch, already weighted for its minibatch; plus detached statistics.

    is_weights: [B, >=T-1] truncated importance weights (or None), multiplied into the clipped
    policy-gradient term only, not into the KL or entropy terms.
    """
    lengths = packing_lengths(mb, algo)
    out = token_logprobs(model, mb.ids, algo.temperature, with_entropy_grad=algo.entropy_coef > 0, mask=mb.mask,
                         lengths=lengths, allowed=mb.allowed)
    mask = mb.mask
    weights = weights[:, : mask.shape[1]]  # the micro-batch is trimmed to its own longest row
    log_ratio = RATIOS[algo.ratio_level](out.logp, mb.old_logp, mask)
    per_token, stats = ppo_clip_loss(log_ratio, mb.token_advantages(), mask, algo.clip_low, algo.clip_high,
                                     algo.dual_clip)
    if is_weights is not None:
        per_token = per_token * is_weights[:, : mask.shape[1]]
    if algo.kl_coef > 0 and not algo.kl_in_reward:
        with torch.no_grad():
            ref_logp = token_logprobs(ref_model, mb.ids, algo.temperature, mask=mb.mask, lengths=lengths,
                                      allowed=mb.allowed).logp
        policy = mask > 0  # KL only where the policy chose the token: an observation token's value may be huge
        kl = torch.where(policy, KL_ESTIMATORS[algo.kl_kind](torch.where(policy, out.logp, ref_logp), ref_logp), 0.0)
        per_token = per_token + algo.kl_coef * kl
        stats["kl_ref"] = float(kl.detach().sum() / mask.sum().clamp_min(1))
    if algo.entropy_coef > 0:
        per_token = per_token - algo.entropy_coef * out.entropy
    # where, not multiplication: an inf at a masked position would give inf * 0 = NaN in the loss and its gradient
    loss = aggregate(torch.where(mask > 0, per_token, 0.0), weights)
    n_tokens = mask.sum().clamp_min(1)
    stats["entropy"] = float((out.entropy.detach() * mask).sum() / n_tokens)
    gap = (out.logp.detach() - mb.old_logp).abs() * mask
    stats["logp_gap_tokens"] = gap[mask > 0]  # [policy tokens] (a tensor: policy_update pops it)
    stats["logp_diff_tokens"] = (out.logp.detach() - mb.old_logp)[mask > 0]  # [policy tokens] log pi - log old, signed
    if not hasattr(model, "token_logprobs"):  # a chat model computes its entropy at the policy tokens only
        stats["obs_entropy_tokens"] = out.entropy.detach()[observation_positions(mask, mb.lengths())]
    stats["log_ratio_tokens"] = log_ratio.detach()[mask > 0].abs()  # [policy tokens] |log pi_theta / pi_old|
    stats["tokens"] = float(mask.sum())
    return loss, stats


def zero_advantage_split(mb: Batch, algo) -> list[tuple[torch.Tensor | slice, bool]]:
    """(rows, needs backward) parts of a micro-batch. Rows with advantage 0 (at every token, the turn
    term included) have loss and gradient exactly 0 when no KL or entropy term applies to them, so they
    skip the backward (a no-grad pass still measures their statistics); the minibatch's aggregation
    weights still count their tokens."""
    idle = mb.advantages == 0  # [B]
    if mb.turn_advantages is not None:
        idle &= (mb.turn_advantages == 0).all(1)
    if algo.entropy_coef > 0 or (algo.kl_coef > 0 and not algo.kl_in_reward) or not idle.any():
        return [(slice(None), True)]
    return [(index, backward) for index, backward in (((~idle).nonzero().squeeze(1), True),
                                                      (idle.nonzero().squeeze(1), False)) if len(index)]


def policy_update(model, optimizer, batch: Batch, algo, generator: torch.Generator, ref_model=None,
                  parallel=SingleProcess()) -> dict:
    """Epochs x minibatches of clipped updates on `batch` (advantages filled). Returns step metrics.

    Without tis_cap, old_logp are the sampler's log-probs mu and anchor the PPO ratio, so the ratio is
    exactly 1 at the first minibatch; the sampler-trainer gap is read there, before any parameter
    changed. With tis_cap (decoupled correction, design review question 16), the trainer's log-probs
    before this step, pi_old, anchor the ratio pi_theta / pi_old that PPO clips, and the clipped term
    is weighted by min(pi_old / mu, C); both are computed once per step, before any update.

    With max_traj_gap (design review question 17) the trainer's log-probs pi_prox before this step are
    computed too, and every episode whose largest |log pi_prox - log mu| at a policy token exceeds the
    bound leaves the loss (its policy tokens masked; `gap_filtered` counts them). Every step logs
    kl_mu_prox, KL(mu || pi_prox) per policy token (q16; over the whole batch when pi_prox was computed,
    else over the first minibatch, before any parameter moved), mask_share (policy tokens / real
    positions) and obs_entropy (the policy's entropy at prompt and observation positions; None for a
    chat model, which computes entropies at policy tokens only) (q28).

    parallel (algo/data_parallel.py): which rows of each minibatch this process trains on and how its
    gradients meet the other ranks'; `model` is then the module it wraps (DDP) or shards (FSDP2).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    sums: dict[str, float] = {}
    token_total = 0.0
    grad_norms, first_gaps, log_ratios, first_diffs, obs_entropies = [], [], [], [], []
    is_weights, tis_metrics, prox = None, {"mask_share": mask_share(batch.mask, batch.lengths())}, None
    if algo.tis_cap is not None or algo.max_traj_gap is not None:
        with torch.no_grad():
            prox = batch_logprobs(model, batch, algo).logp  # [B, T-1] pi_old
        # sampler vs trainer, as without TIS; every rank computed it over the whole batch: count it once
        first_gaps = [(prox - batch.old_logp).abs()[batch.mask > 0]] if parallel.rank == 0 else []
        first_diffs = [(prox - batch.old_logp)[batch.mask > 0]] if parallel.rank == 0 else []
    if algo.max_traj_gap is not None:
        kept = trajectory_gap_kept(prox, batch.old_logp, batch.mask, algo.max_traj_gap)  # [B]
        tis_metrics["gap_filtered"] = int((~kept & (batch.mask > 0).any(1)).sum())
        batch = dataclasses.replace(batch, mask=batch.mask * kept[:, None])  # the caller's mask stays as it was
    if algo.tis_cap is not None:
        is_weights, truncated = truncated_is_weights(prox, batch.old_logp, batch.mask, algo.tis_cap, algo.tis_level)
        tis_metrics["tis_truncated_frac"] = truncated
        batch = dataclasses.replace(batch, old_logp=prox)  # a new Batch: the caller's old_logp stay mu
    skipped_steps: list[bool] = []  # per optimizer step: skipped for a non-finite loss or gradient norm
    loss_skips = 0  # of those, the steps whose loss (some objective term) was not finite
    for _epoch in range(algo.epochs):
        order = torch.randperm(len(batch), generator=generator)
        for rows in order.tensor_split(algo.minibatches):  # exactly `minibatches` parts (chunk() may give fewer)
            if not len(rows):  # fewer rows than minibatches (a filtered batch): nothing to step on
                continue
            mb = batch.rows(rows)
            weights = AGGREGATIONS[algo.loss_mode](mb.mask, algo.norm_const)  # over the whole minibatch: global
            mb_is_weights = None if is_weights is None else is_weights[rows]
            optimizer.zero_grad(set_to_none=True)
            backward_rows, finite_loss = 0, True
            for part in parallel.parts(len(mb), algo.micro_batch_size):
                sub, sub_weights = mb.rows(part.index), weights[part.index] * (0.0 if part.dummy else 1.0)
                sub_is_weights = None if mb_is_weights is None else mb_is_weights[part.index]
                split = zero_advantage_split(sub, algo) if parallel.skips_zero_advantage_rows() else [(slice(None), True)]
                for index, backward in split:
                    piece = sub if isinstance(index, slice) else sub.rows(index)
                    with parallel.synchronising(model, part.last), torch.set_grad_enabled(backward):
                        loss, stats = minibatch_loss(model, piece, sub_weights[index], algo, ref_model,
                                                     None if sub_is_weights is None else sub_is_weights[index])
                        # every objective term is summed into the loss, so a NaN/inf term shows here even
                        # where its gradient is finite (a NaN reference log-prob: k1 and k3 have finite grads)
                        finite_loss = finite_loss and bool(torch.isfinite(loss))
                        if backward:
                            loss.backward()
                            backward_rows += len(piece)
                    if part.dummy:  # a row at weight 0, run only to keep the ranks' collectives in step
                        continue
                    gaps = stats.pop("logp_gap_tokens", None)
                    diffs = stats.pop("logp_diff_tokens", None)
                    log_ratios.append(stats.pop("log_ratio_tokens"))
                    if "obs_entropy_tokens" in stats:
                        obs_entropies.append(stats.pop("obs_entropy_tokens"))
                    if not skipped_steps and gaps is not None and prox is None:  # first minibatch: nothing moved yet
                        first_gaps.append(gaps)
                        first_diffs.append(diffs)
                    tokens = stats.pop("tokens")
                    for key, value in stats.items():  # token-weighted sums
                        sums[key] = sums.get(key, 0.0) + value * tokens
                    token_total += tokens
            if not backward_rows:  # every row skipped: the exact gradient is 0, and the optimizer still steps
                for p in params:
                    p.grad = torch.zeros_like(p)
            grad_norm = parallel.clip(params, algo.max_grad_norm)
            finite_loss = parallel.all_ranks(finite_loss)  # every rank skips the same steps
            finite = finite_loss and math.isfinite(grad_norm)
            if finite:  # a NaN/inf step would poison the weights and Adam's moments for good
                optimizer.step()
                grad_norms.append(grad_norm)
            skipped_steps.append(not finite)
            loss_skips += not finite_loss
    sums, token_total, (first_gaps, log_ratios, first_diffs, obs_entropies) = parallel.gather_stats(
        sums, token_total, [first_gaps, log_ratios, first_diffs, obs_entropies])
    metrics = {k: v / max(token_total, 1.0) for k, v in sums.items()}
    metrics.update(tis_metrics)
    metrics["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
    metrics["nonfinite_skips"] = float(sum(skipped_steps))
    metrics["nonfinite_loss_skips"] = float(loss_skips)
    metrics["skipped_steps"] = skipped_steps  # a list: the trainer pops it to count skips in a row
    metrics.update(gap_summary(first_gaps))
    metrics["kl_mu_prox"] = kl_sampler_proximal(torch.cat(first_diffs)) if first_diffs else 0.0
    observed = torch.cat(obs_entropies) if obs_entropies else torch.zeros(0)
    metrics["obs_entropy"] = float(observed.mean()) if len(observed) else None
    metrics.update(log_ratio_summary(log_ratios))
    return metrics


def log_ratio_summary(values: list[torch.Tensor]) -> dict[str, float]:
    """|log pi_theta / pi_old| over every policy token of every minibatch of the step (design-review
    questions 5 and 20): p50, p99, p99.9 and max. The first minibatch sits at 0 (nothing moved yet); a
    p99.9 or max far above the clip range (log 1.2 = 0.18) is where a few tokens dominate the update."""
    flat = torch.cat(values).float().cpu() if values else torch.zeros(0)  # the quantile levels live on the CPU
    if not len(flat):
        return {"log_ratio_abs_p50": 0.0, "log_ratio_abs_p99": 0.0, "log_ratio_abs_p999": 0.0, "log_ratio_abs_max": 0.0}
    quantiles = torch.quantile(flat, torch.tensor([0.5, 0.99, 0.999]))
    return {"log_ratio_abs_p50": float(quantiles[0]), "log_ratio_abs_p99": float(quantiles[1]),
            "log_ratio_abs_p999": float(quantiles[2]), "log_ratio_abs_max": float(flat.max())}


def gap_summary(gaps: list[torch.Tensor]) -> dict[str, float]:
    """Max, mean and 99th percentile of |trainer - sampler| log-prob over the policy tokens measured
    (the whole first minibatch, before any parameter moved; with TIS the whole batch)."""
    values = torch.cat(gaps).float() if gaps else torch.zeros(0)
    if not len(values):
        return {"logp_gap": 0.0, "logp_gap_mean": 0.0, "logp_gap_p99": 0.0}
    return {"logp_gap": float(values.max()), "logp_gap_mean": float(values.mean()),
            "logp_gap_p99": float(torch.quantile(values, 0.99))}
