"""Hand-computed edges of the loss math and the statistics that a mutation run (scripts/mutation.sh)
showed no test pinned: k2's sign, GRPO's eps, the smallest valid group, and the input ranges each
function accepts or refuses."""

from __future__ import annotations

import math
import re

import pytest
import torch

from bugfix_rl.algo.advantages import grpo, rloo
from bugfix_rl.algo.objective import kl_k2, overlong_penalty, truncated_is_weights
from bugfix_rl.evaluate.stats import degenerate_group_probability, required_units


def test_k2_by_hand():
    # 0.5 * (ref - logp)^2 with logp = -1, ref = -3: 0.5 * 4 = 2 (ref + logp would give 8)
    assert float(kl_k2(torch.tensor(-1.0), torch.tensor(-3.0))) == pytest.approx(2.0)


def test_grpo_eps_adds_to_the_std():
    # [1, 0]: centred +-0.5, population std 0.5; eps 0.5 -> 0.5 / (0.5 + 0.5) = 0.5
    torch.testing.assert_close(grpo(torch.tensor([[1.0, 0.0]]), 0.5), torch.tensor([[0.5, -0.5]]))


def test_rloo_accepts_a_group_of_two_and_refuses_one():
    # G = 2: r_i - the other reward: [1, -1]
    torch.testing.assert_close(rloo(torch.tensor([[1.0, 0.0]]), 0.0), torch.tensor([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="group_size >= 2"):
        rloo(torch.tensor([[1.0]]), 0.0)


def test_required_units_ranges():
    assert required_units(0.1, 0.1) == 8  # ceil((1.96 + 0.84)^2) = ceil(7.84)
    for sd, effect in ((0.0, 0.1), (0.1, 0.0)):
        with pytest.raises(ValueError, match="sd > 0 and effect != 0"):
            required_units(sd, effect)
    for alpha, power in ((0.0, 0.8), (1.0, 0.8), (0.05, 0.0), (0.05, 1.0), (1.5, 0.8), (0.05, 1.5)):
        with pytest.raises(ValueError, match=r"must be in \(0, 1\)"):
            required_units(0.1, 0.1, alpha, power)


def test_degenerate_group_probability_ranges():
    assert degenerate_group_probability(0.0, 8) == 1.0 and degenerate_group_probability(1.0, 8) == 1.0
    assert degenerate_group_probability(0.5, 1) == 1.0  # one rollout is always all-pass or all-fail
    for p, group_size in ((-0.1, 8), (1.1, 8), (2.0, 8), (0.5, 0)):
        with pytest.raises(ValueError, match="0 <= p <= 1 and group_size >= 1"):
            degenerate_group_probability(p, group_size)


def test_overlong_penalty_buffer_range():
    torch.testing.assert_close(overlong_penalty(torch.tensor([0, 5, 10]), 10, 10), torch.tensor([0.0, -0.5, -1.0]))
    torch.testing.assert_close(overlong_penalty(torch.tensor([9, 10]), 10, 1), torch.tensor([0.0, -1.0]))
    for buffer in (0, 11):
        with pytest.raises(ValueError, match="0 < buffer <= max_len"):
            overlong_penalty(torch.tensor([5]), 10, buffer)


def test_truncated_is_weights_cap_range_and_boundary():
    with pytest.raises(ValueError, match="cap must be > 0"):
        truncated_is_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), 0.0, "token")
    # a ratio exactly at the cap is not truncated; just above it is; a row without policy tokens counts nowhere
    prox = torch.tensor([[torch.log(torch.tensor(2.0)), 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    _, truncated = truncated_is_weights(prox, torch.zeros(2, 2), mask, 2.0, "sequence")
    assert truncated == 0.0
    _, truncated = truncated_is_weights(prox + 0.01, torch.zeros(2, 2), mask, 2.0, "sequence")
    assert truncated == 1.0


# ------------------------------------------------ written against the survivors of the second mutation run
# (docs/ALGORITHMS.md): input checks with their messages, pinned intervals, one-token edge cases.


def test_pass_at_k_rejects_bad_input_with_its_message():
    from bugfix_rl.evaluate.stats import pass_at_k

    for k in (0, 5):
        with pytest.raises(ValueError, match=r"^pass@k needs 1 <= k <= n, got k=%d, n=4$" % k):
            pass_at_k(4, torch.tensor([1, 2]), k)
    with pytest.raises(ValueError, match=r"^counts must have shape \[T\], got \(2, 2\)$"):
        pass_at_k(4, torch.ones(2, 2, dtype=torch.long), 1)
    for bad in (-1, 5):
        with pytest.raises(ValueError, match=r"^counts must lie in \[0, 4\]$"):
            pass_at_k(4, torch.tensor([1, bad]), 1)


def test_bootstrap_ci_rejects_bad_input_with_its_message_and_takes_one_task():
    from bugfix_rl.evaluate.stats import bootstrap_ci

    for values, shape in ((torch.ones(2, 2), "(2, 2)"), (torch.ones(0), "(0,)")):
        with pytest.raises(ValueError, match=r"^values must have shape \[T\] with T >= 1, got %s$" % re.escape(shape)):
            bootstrap_ci(values)
    for alpha in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"^alpha must be in \(0, 1\), got %s$" % alpha):
            bootstrap_ci(torch.ones(3), alpha=alpha)
    assert bootstrap_ci(torch.tensor([0.5])) == (0.5, 0.5)


def test_paired_bootstrap_diff_rejects_unmatched_tasks_with_its_message():
    from bugfix_rl.evaluate.stats import paired_bootstrap_diff

    with pytest.raises(ValueError, match=r"^a and b must give matching \[T\] scores, got \(3,\), \(4,\)$"):
        paired_bootstrap_diff(torch.ones(3), torch.ones(4))


SPREAD = (torch.arange(1, 21, dtype=torch.float64) ** 1.7) % 1.0  # 20 irregular values in [0, 1)


def test_the_printed_intervals_are_pinned():
    """Fixed inputs pin the bootstraps (kept as the coverage comparison) and the Wilson interval every run
    prints for one policy: a change of resample count,
    seed, quantiles, index range or dtype moves them (these digits were read off the code that wrote
    the README's tables)."""
    from bugfix_rl.evaluate.stats import bootstrap_ci, paired_bootstrap_diff, pass_rate_summary

    assert bootstrap_ci(SPREAD) == (0.3136016199622792, 0.5672586990666455)
    assert bootstrap_ci(SPREAD, seed=1) == (0.31425899658021494, 0.5629748079996625)
    a = [0.13, 0.52, 0.91, 0.34, 0.77, 0.05, 0.68, 0.29]
    b = [0.31, 0.12, 0.22, 0.44, 0.17, 0.35, 0.61, 0.09]
    assert paired_bootstrap_diff(a, b) == (0.17249999707564712, -0.06375000161351636, 0.4112812516279514)
    counts = torch.tensor([3, 31, 0, 17, 25, 9, 1, 26, 12, 28, 4, 7, 13, 30, 19, 0, 11, 32, 6, 15])
    assert pass_rate_summary(counts, 32)["ci"] == pytest.approx([0.2594566, 0.6592774], abs=5e-8)  # Wilson, T = 20
    assert paired_bootstrap_diff(a, b, n_boot=2000, alpha=0.1, seed=7) == (
        0.17249999707564712, -0.03756250110454857, 0.37131250335369254)  # every argument reaches the bootstrap
    assert paired_bootstrap_diff(torch.tensor([3, 7, 1, 9]), torch.tensor([2, 2, 5, 4])) == (1.75, -1.75, 5.0)  # counts
    tenths = torch.tensor([3, 10, 0, 7, 5, 9, 1, 6, 2, 8, 4, 7])  # n = 10: rates not exact in float32
    assert pass_rate_summary(tenths, 10)["ci"] == pytest.approx([0.2665103, 0.7587399], abs=5e-8)  # T = 12


def test_one_policy_token_gets_its_full_weight_and_statistics():
    from bugfix_rl.algo.objective import (_num_seqs, ppo_clip_loss, seq_mean_token_mean_weights, sequence_log_ratio,
                                          token_mean_weights)

    mask = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # one policy token in row 0
    assert float(token_mean_weights(mask, None)[0, 1]) == 1.0
    assert float(seq_mean_token_mean_weights(mask, None)[0, 1]) == 1.0
    assert float(_num_seqs(mask)) == 1.0
    two_rows = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    assert float(_num_seqs(two_rows)) == 2.0  # a one-token row counts as a sequence
    logp, old = torch.tensor([[0.0, -0.5, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([[0.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    assert float(sequence_log_ratio(logp, old, mask)[0, 1]) == pytest.approx(0.5)  # the one token's log ratio
    _, stats = ppo_clip_loss(torch.tensor([[0.0, 0.1, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([1.0, 0.0]), mask, 0.2, 0.2)
    assert stats["approx_kl"] == pytest.approx(math.exp(0.1) - 1 - 0.1, abs=1e-7)  # k3 of the one token


def test_norm_const_must_be_positive_and_one_is_allowed():
    from bugfix_rl.algo.objective import norm_const_weights

    mask = torch.ones(2, 3)
    for bad in (0.0, -1.0, None):
        with pytest.raises(ValueError):
            norm_const_weights(mask, bad)
    assert torch.equal(norm_const_weights(mask, 1.0), mask)


def test_a_dual_clip_just_above_one_is_allowed():
    from bugfix_rl.algo.objective import ppo_clip_loss

    mask = torch.ones(1, 2)
    per_token, _ = ppo_clip_loss(torch.tensor([[2.0, 0.0]]), torch.tensor([-1.0]), mask, 0.2, 0.2, dual_clip=1.5)
    assert float(per_token[0, 0]) == pytest.approx(1.5)  # |A| x 1.5, not |A| x e^2
