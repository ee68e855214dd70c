"""Hand-computed edges of the loss math and the statistics that a mutation run (scripts/mutation.sh)
showed no test pinned: k2's sign, GRPO's eps, the smallest valid group, and the input ranges each
function accepts or refuses."""

from __future__ import annotations

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
