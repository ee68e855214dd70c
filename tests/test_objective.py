"""Objective pieces against hand-computed numbers (design review, questions 1, 2, 5, 16)."""

import math

import pytest
import torch

from bugfix_rl.algo.objective import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    aggregate,
    overlong_penalty,
    ppo_clip_loss,
    truncated_is_weights,
)
from bugfix_rl.policy.entropy import entropy_from_logits

# ------------------------------------------------------------------------------------------------
# Helpers: a tiny linear "policy" whose per-token log-probs carry a gradient.


def tiny_policy_logp(weight, features, targets):
    """weight [D, V], features [B, T, D], targets [B, T] -> log pi(target) [B, T]."""
    logp = torch.log_softmax(features @ weight, dim=-1)  # [B, T, V]
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def make_batch(lengths, prompt_lengths, total_length, dim=4, vocab=6, seed=0):
    """Random features/targets and a mask with the given prompt and policy spans per row."""
    generator = torch.Generator().manual_seed(seed)
    batch = len(lengths)
    features = torch.randn(batch, total_length, dim, generator=generator, dtype=torch.float64)
    targets = torch.randint(vocab, (batch, total_length), generator=generator)
    mask = torch.zeros(batch, total_length, dtype=torch.float64)
    for row, (prompt, length) in enumerate(zip(prompt_lengths, lengths)):
        mask[row, prompt : prompt + length] = 1.0
    weight = torch.randn(dim, vocab, generator=generator, dtype=torch.float64)
    # old policy = a perturbed copy, so ratios differ from 1 and some tokens clip.
    old_weight = weight + 0.3 * torch.randn(dim, vocab, generator=generator, dtype=torch.float64)
    old_logp = tiny_policy_logp(old_weight, features, targets)
    return weight, features, targets, mask, old_logp


def minibatch_gradient(weight, features, targets, mask, old_logp, advantages, weights_of, row_splits,
                       ratio="token"):
    """Sum of gradients over micro-batches (row subsets); weights_of(rows) gives their token weights."""
    weight = weight.clone().requires_grad_(True)
    for rows in row_splits:
        logp = tiny_policy_logp(weight, features[rows], targets[rows])
        log_ratio = RATIOS[ratio](logp, old_logp[rows], mask[rows])
        loss, _ = ppo_clip_loss(log_ratio, advantages[rows], mask[rows], 0.2, 0.28, dual_clip=3.0)
        aggregate(loss, weights_of(rows)).backward()
    return weight.grad


# ------------------------------------------------------------------------------------------------
# 1. KL estimators (question 5).


def test_kl_estimators_hand_example():
    logp = torch.zeros(3, dtype=torch.float64)
    ref_logp = torch.tensor([-0.2, 0.1, -0.5], dtype=torch.float64)  # log r = ref_logp - logp
    means = {name: KL_ESTIMATORS[name](logp, ref_logp).mean().item() for name in ("k1", "k2", "k3")}
    assert means["k1"] == pytest.approx(0.200, abs=1e-12)
    assert means["k2"] == pytest.approx(0.050, abs=1e-12)
    assert means["k3"] == pytest.approx(0.0435, abs=5e-5)
    per_token_k1 = KL_ESTIMATORS["k1"](logp, ref_logp)
    torch.testing.assert_close(per_token_k1, torch.tensor([0.2, -0.1, 0.5], dtype=torch.float64))
    per_token_k3 = KL_ESTIMATORS["k3"](logp, ref_logp)
    torch.testing.assert_close(
        per_token_k3, torch.tensor([0.0187, 0.0052, 0.1065], dtype=torch.float64), atol=1e-4, rtol=0
    )


# ------------------------------------------------------------------------------------------------
# 3. Aggregation weights (question 1): trajectories with 40 and 2,400 policy tokens.


def test_aggregation_weights_40_and_2400_tokens():
    mask = torch.zeros(3, 2410, dtype=torch.float64)
    mask[0, 10:50] = 1.0  # 40 policy tokens after a 10-token prompt
    mask[1, 10:2410] = 1.0  # 2,400 policy tokens
    # row 2 has no policy tokens: it must not count as a sequence.

    def at(weights):
        return weights[0, 10].item(), weights[1, 10].item()

    assert at(AGGREGATIONS["token_mean"](mask, None)) == pytest.approx((1 / 2440, 1 / 2440), rel=1e-12)
    assert at(AGGREGATIONS["seq_mean_token_mean"](mask, None)) == pytest.approx((1 / 80, 1 / 4800), rel=1e-12)
    assert at(AGGREGATIONS["seq_mean_token_sum"](mask, None)) == pytest.approx((1 / 2, 1 / 2), rel=1e-12)
    assert at(AGGREGATIONS["norm_const"](mask, 2440.0)) == pytest.approx((1 / 2440, 1 / 2440), rel=1e-12)
    assert at(AGGREGATIONS["norm_const"](mask, 4096.0)) == pytest.approx((1 / 4096, 1 / 4096), rel=1e-12)

    for name in AGGREGATIONS:
        weights = AGGREGATIONS[name](mask, 2440.0)
        assert (weights[mask == 0] == 0).all(), name
    # seq_mean_token_mean: each trajectory's total weight is 1/2, so a 40-token token weighs 60x more.
    per_trajectory = AGGREGATIONS["seq_mean_token_mean"](mask, None).sum(dim=-1)
    torch.testing.assert_close(per_trajectory, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))


def test_norm_const_requires_a_constant():
    with pytest.raises(ValueError, match="norm_const"):
        AGGREGATIONS["norm_const"](torch.ones(1, 3), None)


# ------------------------------------------------------------------------------------------------
# 4. Gradient accumulation (question 2): micro-batches with 100 and 900 policy tokens.


def test_naive_micro_batch_mean_reweights_tokens_seed_example():
    # Four micro-batches of the seed example, two of them with 100 and 900 tokens (2,000 in all).
    counts = [100, 900, 300, 700]
    naive = [1 / (len(counts) * count) for count in counts]
    assert naive[0] == pytest.approx(1 / 400) and naive[1] == pytest.approx(1 / 3600)
    mask = torch.zeros(4, 900, dtype=torch.float64)
    for row, count in enumerate(counts):
        mask[row, :count] = 1.0
    weights = AGGREGATIONS["token_mean"](mask, None)
    assert weights[mask > 0].unique().tolist() == pytest.approx([1 / 2000])


def test_grad_accumulation_with_global_weights_matches_one_pass():
    weight, features, targets, mask, old_logp = make_batch(
        lengths=[100, 900], prompt_lengths=[10, 10], total_length=910
    )
    advantages = torch.tensor([1.0, -0.5], dtype=torch.float64)
    global_weights = AGGREGATIONS["token_mean"](mask, None)
    micro_batches = [[0], [1]]

    # Naive: token_mean inside each micro-batch, then the mean over the 2 micro-batches.
    def naive_weights(rows):
        return AGGREGATIONS["token_mean"](mask[rows], None) / len(micro_batches)

    assert naive_weights([0])[0, 10].item() == pytest.approx(1 / 200)
    assert naive_weights([1])[0, 10].item() == pytest.approx(1 / 1800)
    assert global_weights[0, 10].item() == pytest.approx(1 / 1000)
    assert global_weights[1, 10].item() == pytest.approx(1 / 1000)

    args = (weight, features, targets, mask, old_logp, advantages)
    one_pass = minibatch_gradient(*args, lambda rows: global_weights[rows], [[0, 1]])
    accumulated = minibatch_gradient(*args, lambda rows: global_weights[rows], micro_batches)
    naive = minibatch_gradient(*args, naive_weights, micro_batches)

    cosine = torch.nn.functional.cosine_similarity(one_pass.flatten(), accumulated.flatten(), dim=0)
    assert cosine.item() == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(accumulated, one_pass)
    assert not torch.allclose(naive, one_pass, rtol=1e-2)


# ------------------------------------------------------------------------------------------------
# 5. Property: any row split gives the same gradient, for every aggregation and ratio.


@pytest.mark.parametrize("ratio", sorted(RATIOS))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_every_aggregation_is_invariant_to_micro_batch_split(aggregation, ratio):
    generator = torch.Generator().manual_seed(1)
    batch, total_length = 8, 24
    prompt_lengths = torch.randint(0, 6, (batch,), generator=generator).tolist()
    lengths = [
        torch.randint(1, total_length - prompt + 1, (1,), generator=generator).item()
        for prompt in prompt_lengths
    ]
    lengths[3] = 0  # a row without policy tokens
    weight, features, targets, mask, old_logp = make_batch(lengths, prompt_lengths, total_length, seed=2)
    advantages = torch.randn(batch, generator=generator, dtype=torch.float64)
    weights = AGGREGATIONS[aggregation](mask, 37.0)
    order = torch.randperm(batch, generator=generator).tolist()

    gradients = []
    for num_micro in (1, 2, 4):
        splits = [order[i::num_micro] for i in range(num_micro)]
        gradients.append(
            minibatch_gradient(weight, features, targets, mask, old_logp, advantages,
                               lambda rows: weights[rows], splits, ratio=ratio)
        )
    assert gradients[0].abs().sum() > 0
    for gradient in gradients[1:]:
        torch.testing.assert_close(gradient, gradients[0], rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------------
# 6. PPO clipped loss by hand: clip_low=0.2, clip_high=0.28, dual clip c=3.

RATIOS_BY_HAND = [1.5, 0.5, 0.5, 1.25, 5.0, 2.0, 9.0]
ADVANTAGES_BY_HAND = [1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0]
MASK_BY_HAND = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # last token is padding (r=9 would clip)
# r=1.5, A=+1: clipped to 1.28 (high)      -> -1.28
# r=0.5, A=+1: min(0.5, 0.8) = 0.5         -> -0.5   (unclipped branch)
# r=0.5, A=-1: min(-0.5, -0.8) = -0.8      ->  0.8   (clipped, low)
# r=1.25, A=+1: inside [0.8, 1.28]         -> -1.25  (a symmetric 0.2 would give -1.2)
# r=5, A=-1: PPO leaves it unbounded       ->  5.0,  dual clip caps at 3 -> 3.0
# r=2, A=-1: below the dual cap            ->  2.0


def _hand_inputs():
    log_ratio = torch.tensor([RATIOS_BY_HAND], dtype=torch.float64).log()
    advantages = torch.tensor([ADVANTAGES_BY_HAND], dtype=torch.float64)
    return log_ratio, advantages, torch.tensor([MASK_BY_HAND], dtype=torch.float64)


def test_ppo_clip_hand_values_asymmetric():
    log_ratio, advantages, mask = _hand_inputs()
    loss, metrics = ppo_clip_loss(log_ratio, advantages, mask, clip_low=0.2, clip_high=0.28, dual_clip=None)
    expected = torch.tensor([[-1.28, -0.5, 0.8, -1.25, 5.0, 2.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss, expected)
    # Clipped branch active on tokens 0 (high) and 2 (low) of 6 policy tokens; the padding is ignored.
    assert metrics["clip_frac"] == pytest.approx(2 / 6)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 6)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 6)
    assert metrics["dual_clip_frac"] == 0.0
    expected_kl = sum(r - 1 - math.log(r) for r in RATIOS_BY_HAND[:6]) / 6
    assert metrics["approx_kl"] == pytest.approx(expected_kl)


def test_ppo_dual_clip_caps_negative_advantage_loss():
    log_ratio, advantages, mask = _hand_inputs()
    loss, metrics = ppo_clip_loss(log_ratio, advantages, mask, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    expected = torch.tensor([[-1.28, -0.5, 0.8, -1.25, 3.0, 2.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(loss, expected)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(log_ratio, advantages, mask, 0.2, 0.28, dual_clip=1.0)


def test_ppo_ratio_one_gives_minus_advantage_and_no_clipping():
    advantages = torch.tensor([0.7, -1.3], dtype=torch.float64)  # [B], one per sequence
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]], dtype=torch.float64)
    loss, metrics = ppo_clip_loss(torch.zeros(2, 3, dtype=torch.float64), advantages, mask, 0.2, 0.28, 3.0)
    expected = torch.tensor([[-0.7, -0.7, 0.0], [0.0, 1.3, 1.3]], dtype=torch.float64)
    torch.testing.assert_close(loss, expected)
    assert metrics == {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0,
                       "dual_clip_frac": 0.0, "approx_kl": 0.0}


def test_ppo_padding_with_huge_log_ratio_gives_finite_gradient():
    log_ratio = torch.tensor([[0.1, 800.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    loss, metrics = ppo_clip_loss(log_ratio, torch.tensor([0.0]).double(), mask, 0.2, 0.28, None)
    loss.sum().backward()
    assert torch.isfinite(log_ratio.grad).all() and metrics["clip_frac"] == 0.0


# ------------------------------------------------------------------------------------------------
# 7. GSPO sequence ratio.


def test_gspo_sequence_ratio_value_and_straight_through_gradient():
    logp = torch.tensor([[-1.0, -2.0, -0.5, 50.0], [-0.3, -0.1, -9.0, -9.0]], dtype=torch.float64)
    old_logp = torch.tensor([[-1.2, -1.5, -0.5, -70.0], [-0.2, -0.4, 3.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    logp.requires_grad_(True)
    log_ratio = RATIOS["sequence"](logp, old_logp, mask)
    seq_means = torch.tensor([(0.2 - 0.5 + 0.0) / 3, (-0.1 + 0.3) / 2], dtype=torch.float64)
    torch.testing.assert_close(log_ratio, seq_means[:, None].expand(2, 4))  # padding ignored
    torch.testing.assert_close(log_ratio.exp()[:, 0], seq_means.exp())
    (log_ratio * mask).sum().backward()
    torch.testing.assert_close(logp.grad, mask)  # straight-through: per-token gradient 1


def test_token_ratio_is_plain_difference():
    logp = torch.tensor([[-1.0, -2.0]])
    old_logp = torch.tensor([[-1.5, -1.0]])
    torch.testing.assert_close(RATIOS["token"](logp, old_logp, torch.ones(1, 2)), torch.tensor([[0.5, -1.0]]))


# ------------------------------------------------------------------------------------------------
# 8. Truncated importance sampling (question 16).


def test_truncated_is_token_and_sequence_levels():
    ratios = torch.tensor([[0.5, 3.0, 1.5, 7.0], [1.5, 1.0, 9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    logp_sampler = torch.randn(2, 4, dtype=torch.float64)
    logp_prox = (logp_sampler + ratios.log()).requires_grad_(True)

    weights, fraction = truncated_is_weights(logp_prox, logp_sampler, mask, cap=2.0, level="token")
    expected = torch.tensor([[0.5, 2.0, 1.5, 0.0], [1.5, 1.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    assert fraction == pytest.approx(1 / 5)  # only the 3.0 of five policy tokens
    assert not weights.requires_grad

    # Sequence level: products 0.5 * 3 * 1.5 = 2.25 -> capped at 2; 1.5 * 1 = 1.5 -> kept.
    weights, fraction = truncated_is_weights(logp_prox, logp_sampler, mask, cap=2.0, level="sequence")
    expected = torch.tensor([[2.0, 2.0, 2.0, 0.0], [1.5, 1.5, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    assert fraction == pytest.approx(1 / 2)
    assert not weights.requires_grad

    # A cap below 1 binds on 4 of 5 policy tokens (all but the 0.5); padding never counts.
    weights, fraction = truncated_is_weights(logp_prox, logp_sampler, mask, cap=0.8, level="token")
    expected = torch.tensor([[0.5, 0.8, 0.8, 0.0], [0.8, 0.8, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(weights, expected)
    assert fraction == pytest.approx(4 / 5)


def test_truncated_is_sequence_level_does_not_overflow():
    mask = torch.ones(1, 2000, dtype=torch.float64)
    logp_sampler = torch.full((1, 2000), -1.0)  # every token ratio e: the product is e^2000
    weights, fraction = truncated_is_weights(torch.zeros(1, 2000), logp_sampler, mask, 2.0, "sequence")
    assert (weights == 2.0).all() and fraction == 1.0


# ------------------------------------------------------------------------------------------------
# Entropy and overlong penalty.


def test_entropy_from_logits():
    uniform = torch.zeros(2, 3, 5)
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2, 3), math.log(5)))
    logits = torch.tensor([[1000.0, 1000.0, float("-inf"), -5.0]], requires_grad=True)
    entropy = entropy_from_logits(logits)
    assert entropy.item() == pytest.approx(math.log(2), abs=1e-4)
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
    reference = torch.distributions.Categorical(logits=torch.tensor([[0.3, -1.2, 2.0]])).entropy()
    torch.testing.assert_close(entropy_from_logits(torch.tensor([[0.3, -1.2, 2.0]])), reference)


def test_overlong_penalty_is_dapo_soft_punishment():
    lengths = torch.tensor([50, 80, 90, 100, 120])
    penalty = overlong_penalty(lengths, max_len=100, buffer=20)
    torch.testing.assert_close(penalty, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 100, 20, penalty=0.5)[2], torch.tensor(-0.25))


# ------------------------------------------------------------------------------------------------
# 9. Registries list the valid keys.


@pytest.mark.parametrize("registry", [KL_ESTIMATORS, RATIOS, AGGREGATIONS])
def test_unknown_registry_key_lists_valid_keys(registry):
    with pytest.raises(KeyError) as error:
        registry["no_such_key"]
    for key in registry:
        assert key in str(error.value)


def test_unknown_tis_level_lists_valid_levels():
    with pytest.raises(ValueError, match="sequence, token"):
        truncated_is_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), 2.0, "turn")


def test_k3_is_clamped_as_verl_low_var_kl_with_a_finite_gradient():
    """log r = ref - logp: 2 -> e^2 - 3 (under the cap), 3 and -12 -> 10 (the cap), +-100 -> 10 with a
    zero, finite gradient (without the clamp of log r, exp(100) overflows and the backward gives NaN)."""
    import math

    from bugfix_rl.algo.objective import kl_k3

    log_r = torch.tensor([2.0, 3.0, -12.0, 100.0, -100.0, 0.0])
    logp = torch.zeros(6, requires_grad=True)
    value = kl_k3(logp, log_r)  # ref_logp = log r when logp = 0
    torch.testing.assert_close(value.detach(), torch.tensor([math.exp(2) - 3, 10, 10, 10, 10, 0.0]))
    value.sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[1:5].abs().max() == 0  # clamped: no push from those tokens
    assert logp.grad[0] == pytest.approx(1 - math.exp(2))  # d/dlogp (e^(ref-logp) - 1 - (ref-logp))
