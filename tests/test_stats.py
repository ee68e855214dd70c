"""Evaluation statistics against hand-computed values (design-review questions 21, 22 and the power table)."""

import math
from fractions import Fraction

import pytest
import torch

from bugfix_rl.evaluate.stats import (
    bootstrap_ci,
    degenerate_group_probability,
    gain_kept,
    paired_bootstrap_diff,
    pass_at_k,
    pass_rate_summary,
    power_table,
    required_units,
)
from bugfix_rl.present.plots import forest_plot


def test_pass_at_k_hand_values_and_not_plug_in():
    counts = torch.tensor([3])
    assert pass_at_k(10, counts, 1).item() == pytest.approx(0.3, abs=1e-12)
    pass_at_5 = pass_at_k(10, counts, 5).item()
    assert pass_at_5 == pytest.approx(1 - 21 / 252, abs=1e-12)  # 0.9167
    plug_in = 1 - (1 - 0.3) ** 5  # 0.832, biased low
    assert abs(pass_at_5 - plug_in) > 0.08


def test_pass_at_k_matches_exact_binomials():
    n = 12
    counts = torch.arange(0, n + 1)  # every c from 0 to n
    for k in (1, 3, 7, 12):
        got = pass_at_k(n, counts, k)
        assert got.dtype == torch.float64 and got.shape == (n + 1,)
        expected = [1 - math.comb(n - c, k) / math.comb(n, k) for c in range(n + 1)]
        assert got.tolist() == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_stable_for_large_n():
    n, c, k = 2000, 37, 300
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    got = pass_at_k(n, torch.tensor([c]), k).item()
    assert math.isfinite(got)
    assert got == pytest.approx(float(exact), rel=1e-10)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError):
        pass_at_k(4, torch.tensor([1, 2]), 5)


def test_bootstrap_ci_constant_vector_is_degenerate():
    lo, hi = bootstrap_ci(torch.full((17,), 0.375), n_boot=500)
    assert lo == pytest.approx(0.375, abs=1e-12)
    assert hi == pytest.approx(0.375, abs=1e-12)


def test_bootstrap_ci_reproducible_and_seed_dependent():
    values = torch.rand(40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    first = bootstrap_ci(values, n_boot=2000, seed=7)
    assert bootstrap_ci(values, n_boot=2000, seed=7) == first
    assert bootstrap_ci(values, n_boot=2000, seed=8) != first
    lo, hi = first
    assert lo < float(values.mean()) < hi
    # Roughly mean +- 1.96 * standard error of the task mean.
    standard_error = float(values.std()) / math.sqrt(values.numel())
    assert hi - lo == pytest.approx(2 * 1.96 * standard_error, rel=0.15)


def test_paired_diff_of_identical_vectors_is_zero():
    values = torch.rand(25, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert paired_bootstrap_diff(values, values.clone(), n_boot=500) == (0.0, 0.0, 0.0)


def test_paired_diff_detects_consistent_shift_that_unpaired_intervals_miss():
    generator = torch.Generator().manual_seed(3)
    b = torch.rand(50, generator=generator, dtype=torch.float64) * 0.9  # wide task difficulty spread
    a = b + 0.05 + 0.02 * torch.randn(50, generator=generator, dtype=torch.float64)
    diff, lo, hi = paired_bootstrap_diff(a, b, n_boot=2000)
    assert diff == pytest.approx(float((a - b).mean()))
    assert 0.0 < lo < diff < hi
    # Separate intervals overlap, so the pairing (joint task indices) is what resolves the shift.
    assert bootstrap_ci(a, n_boot=2000)[0] < bootstrap_ci(b, n_boot=2000)[1]


def test_paired_diff_averages_seeds_first():
    generator = torch.Generator().manual_seed(4)
    a = torch.rand(3, 20, generator=generator, dtype=torch.float64)  # [seeds, T]
    b = torch.rand(2, 20, generator=generator, dtype=torch.float64)
    assert paired_bootstrap_diff(a, b, n_boot=300) == paired_bootstrap_diff(
        a.mean(dim=0), b.mean(dim=0), n_boot=300
    )


def test_required_units_reproduces_book_power_table():
    seed_diff_sd = math.sqrt(2) * 0.042
    task_diff_sd = 0.212
    expected = {0.10: (3, 36), 0.05: (12, 141), 0.02: (70, 881)}
    for effect, (seeds, tasks) in expected.items():
        assert required_units(seed_diff_sd, effect) == seeds
        assert required_units(task_diff_sd, effect) == tasks
    # Exact quantiles (1.95996 + 0.84162) would give 142 / 882, not the book's 141 / 881.
    rows = power_table(0.042, task_diff_sd)
    assert [(row["effect"], row["seeds_per_arm"], row["paired_tasks"]) for row in rows] == [
        (0.10, 3, 36),
        (0.05, 12, 141),
        (0.02, 70, 881),
    ]


def test_pass_rate_summary_fields_and_skipped_k():
    counts = torch.tensor([0, 2, 4, 1])
    summary = pass_rate_summary(counts, n=4)
    assert summary["pass_at_1"] == pytest.approx((0 + 0.5 + 1 + 0.25) / 4)
    assert summary["pass_at_4"] == pytest.approx(3 / 4)  # any success among all 4 samples
    assert "pass_at_8" not in summary  # k > n skipped
    assert summary["per_task"] == [0, 2, 4, 1]
    assert summary["n"] == 4 and summary["tasks"] == 4
    lo, hi = summary["ci"]
    assert lo <= summary["pass_at_1"] <= hi
    # Wilson with T = 4 tasks as trials around the mean 0.4375 (z = 1.959964)
    z2 = 1.959963984540054**2
    center = (0.4375 + z2 / 8) / (1 + z2 / 4)
    half = math.sqrt(z2 * (0.4375 * 0.5625 / 4 + z2 / 64)) / (1 + z2 / 4)
    assert (lo, hi) == pytest.approx((center - half, center + half), abs=1e-12)


def test_degenerate_group_probability():
    assert round(degenerate_group_probability(0.1, 4), 3) == 0.656
    assert round(degenerate_group_probability(0.1, 8), 3) == 0.430
    assert round(degenerate_group_probability(0.1, 16), 3) == 0.185
    # At p = 0.1 the all-pass term p^G is below the third decimal; p = 0.5 exercises both terms.
    assert degenerate_group_probability(0.5, 4) == pytest.approx(2 / 16)
    assert degenerate_group_probability(0.3, 8) == pytest.approx(degenerate_group_probability(0.7, 8))


def test_forest_plot_writes_png(tmp_path):
    path = tmp_path / "nested" / "forest.png"
    rows = [
        {"label": "grpo vs base", "diff": 0.05, "lo": 0.01, "hi": 0.09},
        {"label": "dapo vs base", "diff": -0.01, "lo": -0.04, "hi": 0.02},
    ]
    forest_plot(rows, str(path), title="paired differences")
    data = path.read_bytes()
    assert len(data) > 0
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_gain_kept_is_the_ratio_of_the_two_paired_gains_and_none_without_a_held_out_gain():
    heldout = {"diff": 0.40, "ci": [0.10, 0.70]}
    shapes = {"diff": 0.10, "ci": [-0.05, 0.25]}
    kept = gain_kept(heldout, shapes)
    assert kept["share"] == pytest.approx(0.25)  # 0.10 / 0.40
    assert kept["heldout"] == [0.40, 0.10, 0.70] and kept["shapes"] == [0.10, -0.05, 0.25]
    for no_gain in (0.0, -0.2):  # no share of a loss or of nothing
        assert gain_kept({"diff": no_gain, "ci": [-0.5, 0.3]}, shapes)["share"] is None
