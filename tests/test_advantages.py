"""Advantage estimators against hand-computed numbers (design review, question 4)."""

import math

import pytest
import torch

from bugfix_rl.algo.advantages import ADVANTAGES, compute_advantages

ONE_SUCCESS_IN_8 = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)


def test_grpo_one_success_in_8_uses_population_std():
    advantages = compute_advantages("grpo", ONE_SUCCESS_IN_8, eps=0.0)
    expected = torch.tensor([[math.sqrt(7)] + [-1 / math.sqrt(7)] * 7], dtype=torch.float64)
    torch.testing.assert_close(advantages, expected)
    assert advantages[0, 0].item() == pytest.approx(2.6458, abs=1e-4)
    assert advantages[0, 1].item() == pytest.approx(-0.3780, abs=1e-4)
    # Default eps=1e-6 only perturbs in the 6th digit.
    torch.testing.assert_close(compute_advantages("grpo", ONE_SUCCESS_IN_8), expected, atol=1e-5, rtol=0)


def test_grpo_group_means_are_zero():
    rewards = torch.tensor([[1.0, 0, 0, 1], [0.2, 0.7, 0.1, 0.0], [3.0, -1.0, 2.0, 0.5]])
    advantages = compute_advantages("grpo", rewards)
    torch.testing.assert_close(advantages.mean(dim=1), torch.zeros(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(advantages.std(dim=1, unbiased=False), torch.ones(3), atol=1e-5, rtol=0)


def test_dr_grpo_one_success_in_8():
    advantages = compute_advantages("dr_grpo", ONE_SUCCESS_IN_8)
    expected = torch.tensor([[0.875] + [-0.125] * 7], dtype=torch.float64)
    torch.testing.assert_close(advantages, expected)


def test_rloo_by_hand():
    # Success: 1 - mean(seven zeros) = 1. Failure: 0 - mean(one 1, six 0s) = -1/7.
    advantages = compute_advantages("rloo", ONE_SUCCESS_IN_8)
    expected = torch.tensor([[1.0] + [-1 / 7] * 7], dtype=torch.float64)
    torch.testing.assert_close(advantages, expected)
    # Non-binary group: r = (3, 1, 2): baselines (1.5, 2.5, 2.0).
    advantages = compute_advantages("rloo", torch.tensor([[3.0, 1.0, 2.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[1.5, -1.5, 0.0]]))


def test_reinforce_pp_divides_by_batch_std_not_group_std():
    rewards = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0]], dtype=torch.float64)
    centered = torch.tensor([[0.75, -0.25, -0.25, -0.25], [0.5, 0.5, -0.5, -0.5]], dtype=torch.float64)
    # Batch population variance: (0.5625 + 3 * 0.0625 + 4 * 0.25) / 8 = 7/32.
    expected = centered / math.sqrt(7 / 32)
    torch.testing.assert_close(compute_advantages("reinforce_pp", rewards, eps=0.0), expected)
    assert not torch.allclose(compute_advantages("grpo", rewards, eps=0.0), expected)


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_degenerate_group_gets_exactly_zero_not_nan(name, eps):
    # 0.1 is not exactly representable: its float mean leaves a rounding residue unless guarded.
    rewards = torch.tensor([[0.1] * 7, [0.0] * 7, [1.0, 0, 0, 0, 0, 0, 1]])
    advantages = compute_advantages(name, rewards, eps=eps)
    assert torch.isfinite(advantages).all()
    assert (advantages[:2] == 0).all()
    assert (advantages[2] != 0).all()
    # A batch of only degenerate groups is all zeros too (reinforce_pp's batch std is 0).
    assert (compute_advantages(name, rewards[:2], eps=eps) == 0).all()


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(KeyError) as error:
        compute_advantages("ppo_gae", ONE_SUCCESS_IN_8)
    for name in ("grpo", "dr_grpo", "rloo", "reinforce_pp"):
        assert name in str(error.value)
    with pytest.raises(KeyError, match="grpo"):
        ADVANTAGES["nope"]


def test_rewards_must_be_grouped():
    with pytest.raises(ValueError, match="num_groups, group_size"):
        compute_advantages("grpo", torch.zeros(8))
