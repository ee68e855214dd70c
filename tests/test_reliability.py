"""pass^k, flip rate and the noise floor (evaluate/reliability.py, issue 39) against hand-computed
numbers, exact unbiasedness over the binomial distribution, and the floor's 95% by simulation."""

from __future__ import annotations

import math

import pytest
import torch

from bugfix_rl.evaluate.reliability import (evaluation_noise_floor, flip_rate, pass_hat_k, reliability_line,
                                            reliability_summary, run_noise_floor)
from bugfix_rl.evaluate.stats import pass_rate_summary

COUNTS = torch.tensor([4, 2, 0, 3])  # successes of n = 4 on four tasks


def test_pass_hat_k_by_hand():
    # C(c, 2) / C(4, 2): 6/6, 1/6, 0, 3/6
    torch.testing.assert_close(pass_hat_k(4, COUNTS, 2), torch.tensor([1.0, 1 / 6, 0.0, 0.5], dtype=torch.float64))
    torch.testing.assert_close(pass_hat_k(4, COUNTS, 4), torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(pass_hat_k(4, COUNTS, 1), COUNTS.double() / 4)  # pass^1 = pass@1
    assert float(pass_hat_k(4, COUNTS, 3)[3]) == pytest.approx(1 / 4)  # C(3, 3) / C(4, 3)


def test_flip_rate_by_hand():
    # c (n - c) / C(n, 2): 0, 4/6, 0, 3/6 -> mean 7/24
    torch.testing.assert_close(flip_rate(4, COUNTS), torch.tensor([0.0, 2 / 3, 0.0, 0.5], dtype=torch.float64))
    assert float(flip_rate(2, torch.tensor([1]))) == 1.0  # one pass, one fail: the only pair disagrees


@pytest.mark.parametrize("n", [2, 3, 8, 16])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.37, 0.5, 0.9])
def test_both_estimators_are_unbiased_at_every_n(n, p):
    """E over c ~ Binomial(n, p) of the estimate equals p^k and 2 p (1 - p) exactly (the plug-ins do not)."""
    c = torch.arange(n + 1)
    from scipy.stats import binom  # in the test: scipy.stats takes ~1 s to import in every xdist worker

    weights = torch.tensor(binom.pmf(c.numpy(), n, p), dtype=torch.float64)
    for k in range(1, n + 1):
        assert float((weights * pass_hat_k(n, c, k)).sum()) == pytest.approx(p ** k, abs=1e-12)
    assert float((weights * flip_rate(n, c)).sum()) == pytest.approx(2 * p * (1 - p), abs=1e-12)
    plug_in = 2 * (c.double() / n) * (1 - c.double() / n)
    assert float((weights * plug_in).sum()) == pytest.approx(2 * p * (1 - p) * (n - 1) / n, abs=1e-12)


def test_noise_floors_by_hand():
    # mean flip 7/24 over T = 4 tasks x n = 4: 1.96 sqrt((7/24) / 16)
    assert evaluation_noise_floor(4, COUNTS) == pytest.approx(1.959964 * math.sqrt(7 / 24 / 16), rel=1e-6)
    assert run_noise_floor(0.05) == pytest.approx(1.959964 * math.sqrt(2) * 0.05, rel=1e-6)


def test_the_evaluation_floor_bounds_95_percent_of_differences():
    """Two evaluations of one policy (true per-task rates known): |difference| stays under the floor
    computed from the true flip rates about 95% of the time."""
    generator = torch.Generator().manual_seed(0)
    rates = torch.tensor([0.05, 0.2, 0.5, 0.7, 0.9, 0.3, 0.6, 0.15, 0.45, 0.8], dtype=torch.float64)  # T = 10
    n, repeats = 8, 20000
    floor = 1.959964 * math.sqrt(float((2 * rates * (1 - rates)).mean()) / (n * rates.numel()))
    draws = torch.binomial(torch.full((2, repeats, 10), float(n), dtype=torch.float64),
                           rates.expand(2, repeats, 10), generator=generator)  # [2, R, T]
    difference = (draws[0] - draws[1]).mean(1) / n  # [R]
    assert float((difference.abs() <= floor).double().mean()) == pytest.approx(0.95, abs=0.01)


def test_the_summary_and_its_line():
    summary = reliability_summary(COUNTS, 4, ks=(1, 2, 8))
    assert set(summary["pass_hat_k"]) == {"1", "2"}  # k > n is skipped
    assert summary["pass_hat_k"]["2"]["value"] == pytest.approx((1 + 1 / 6 + 0 + 0.5) / 4)
    lo, hi = summary["flip_rate"]["ci"]
    assert summary["flip_rate"]["value"] == pytest.approx(7 / 24) and lo < 7 / 24 < hi
    line = reliability_line(summary, 4, 4)
    assert "pass^2 0.417 [" in line and "flip rate 0.292 [" in line and "4 tasks x 4 episodes" in line
    one = reliability_summary(torch.tensor([1, 0]), 1)
    assert one["flip_rate"] is None and one["noise_floor"] is None and "flip" not in reliability_line(one, 2, 1)
    assert pass_rate_summary(COUNTS, 4)["flip_rate"]["value"] == pytest.approx(7 / 24)  # eval.json carries them


def test_the_reports_noise_floor_by_hand():
    from types import SimpleNamespace

    from bugfix_rl.evaluate.ablation import noise_floor
    from bugfix_rl.present.ablation_report import power_lines

    # two runs of 2 tasks x 4 episodes: counts 4, 2 and 3, 2 -> flip rates 0, 2/3, 1/2, 2/3, mean 11/24
    rows = [SimpleNamespace(task_rates=torch.tensor([[1.0, 0.5], [0.75, 0.5]], dtype=torch.float64))]
    floor = noise_floor(rows, 0.05, 4)
    assert floor["mean_flip_rate"] == pytest.approx(11 / 24)
    assert floor["evaluations"] == pytest.approx(1.959964 * math.sqrt(11 / 24 / 8), rel=1e-6)
    assert floor["runs"] == floor["evaluations"]  # 1.96 sqrt(2) 0.05 = 0.139 is below the evaluations' own 0.469
    assert noise_floor(rows, 0.2, 4)["runs"] == pytest.approx(1.959964 * math.sqrt(2) * 0.2, rel=1e-6)
    assert noise_floor(rows, None, 1) == {"runs": None, "evaluations": None, "mean_flip_rate": None}
    power = {"seed_sd": 0.05, "task_diff_sd": None, "task_diff_arm": None, "left_out": [], "table": [],
             "tasks": 2, "episodes": 4, "noise_floor": floor}
    line = next(line for line in power_lines(power) if line.startswith("noise floor"))
    assert "two runs of one arm differ by up to 0.469 (1.96 sqrt(2) x seed sd, at least the next)" in line
    assert "two evaluations of one checkpoint by up to 0.469" in line
    power["noise_floor"] = noise_floor(rows, None, 4)
    assert "differ by up to - (needs an arm with >= 2 seeds)" in next(l for l in power_lines(power) if "noise" in l)
