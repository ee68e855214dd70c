"""Evaluation statistics: pass@k, task-level bootstrap, paired differences, power.

Pure functions on tensors and floats; no env, model or config objects. The conventions follow the
design-review notes: estimate pass@k per task with the unbiased combinatorial estimator, average over
tasks, and put a bootstrap interval on it that resamples *tasks* (not samples), because tasks are the
unit that varies between benchmarks. Two checkpoints evaluated on the same tasks are compared with a
paired bootstrap, which removes the (large) task-to-task difficulty variance from the comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from scipy.stats import norm


def pass_at_k(n: int, counts: torch.Tensor, k: int) -> torch.Tensor:
    """Unbiased pass@k per task: 1 - C(n - c, k) / C(n, k).

    Args:
        n: samples drawn per task.
        counts: [T] number of successes out of ``n`` for each task (integer or float tensor).
        k: subset size, 1 <= k <= n.

    Returns:
        [T] float64, the probability that a random k-subset of the n samples holds a success.

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k / i) (Chen et al., 2021), which never forms
    the binomial coefficients and so stays finite for large n. This is not the plug-in estimate
    1 - (1 - c/n)^k, which is biased low (Jensen: it is concave in c/n).
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    counts = torch.as_tensor(counts).to(torch.float64)
    if counts.dim() != 1:
        raise ValueError(f"counts must have shape [T], got {tuple(counts.shape)}")
    if ((counts < 0) | (counts > n)).any():
        raise ValueError(f"counts must lie in [0, {n}]")
    i = torch.arange(1, n + 1, dtype=torch.float64)  # [n]
    in_product = i.unsqueeze(0) > (n - counts).unsqueeze(1)  # [T, n]: i in (n - c, n]
    factors = torch.where(in_product, 1.0 - k / i, torch.ones_like(i))  # [T, n]
    estimate = 1.0 - factors.prod(dim=1)  # [T]
    # Fewer than k failures: every k-subset holds a success (the product would hit a zero factor).
    return torch.where(n - counts < k, torch.ones_like(estimate), estimate)


def _bootstrap_means(values: torch.Tensor, n_boot: int, seed: int) -> torch.Tensor:
    """[T] float64 -> [n_boot] means of task resamples drawn with replacement."""
    generator = torch.Generator().manual_seed(seed)
    num_tasks = values.shape[0]
    indices = torch.randint(0, num_tasks, (n_boot, num_tasks), generator=generator)  # [B, T]
    return values[indices].mean(dim=1)  # [B]


def bootstrap_ci(
    values: torch.Tensor, n_boot: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean over tasks.

    Args:
        values: [T] one number per task (e.g. per-task pass rates counts / n).
        n_boot: number of resamples; all drawn at once ([n_boot, T] indices), no Python loop.
        alpha: the interval covers 1 - alpha.
        seed: seeds a private torch.Generator, so the global RNG is untouched and calls repeat.

    Returns:
        (lo, hi): the alpha/2 and 1 - alpha/2 quantiles of the resampled means.
    """
    values = torch.as_tensor(values).to(torch.float64)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"values must have shape [T] with T >= 1, got {tuple(values.shape)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    means = _bootstrap_means(values, n_boot, seed)  # [B]
    bounds = torch.quantile(means, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64))
    return float(bounds[0]), float(bounds[1])


def paired_bootstrap_diff(
    a: torch.Tensor,
    b: torch.Tensor,
    n_boot: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean difference a - b over shared tasks with a paired percentile bootstrap interval.

    Args:
        a, b: [T] per-task scores of two systems on the same tasks, or [S, T] scores from S seeds
            (S may differ between a and b); 2-D inputs are averaged over seeds first, so the task
            is still the resampled unit and seed noise is folded into each task's score.
        n_boot, alpha, seed: as in ``bootstrap_ci``.

    Returns:
        (mean(a - b), lo, hi). One set of task indices is drawn per resample and applied to both
        systems, which is the same as bootstrapping the per-task differences.
    """
    a = torch.as_tensor(a).to(torch.float64)
    b = torch.as_tensor(b).to(torch.float64)
    if a.dim() == 2:
        a = a.mean(dim=0)  # [S, T] -> [T]
    if b.dim() == 2:
        b = b.mean(dim=0)
    if a.dim() != 1 or a.shape != b.shape:
        raise ValueError(f"a and b must give matching [T] scores, got {tuple(a.shape)}, {tuple(b.shape)}")
    diff = a - b  # [T]
    lo, hi = bootstrap_ci(diff, n_boot=n_boot, alpha=alpha, seed=seed)
    return float(diff.mean()), lo, hi


def required_units(sd: float, effect: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Units needed to detect ``effect`` with a two-sided z-test: ceil(((z_a + z_p) * sd / effect)^2).

    Args:
        sd: standard deviation of one unit's measurement of the difference (for seeds per arm, the
            sd of a difference between two arm means, sqrt(2) * seed sd; for paired tasks, the sd of
            the per-task differences).
        effect: the difference to detect (sign ignored).
        alpha: two-sided significance level; z_a = z_{1 - alpha/2}.
        power: 1 - type II error; z_p = z_{power}.

    The quantiles come from scipy.stats.norm but are rounded to 2 decimals (1.96 and 0.84 at the
    defaults). That is the convention of the book's power table; with the exact sum 2.8016 the
    table's 141 / 881 paired tasks would become 142 / 882.
    """
    if sd <= 0 or effect == 0:
        raise ValueError(f"need sd > 0 and effect != 0, got sd={sd}, effect={effect}")
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    z_alpha = round(float(norm.ppf(1 - alpha / 2)), 2)
    z_power = round(float(norm.ppf(power)), 2)
    return math.ceil(((z_alpha + z_power) * sd / abs(effect)) ** 2)


def power_table(
    seed_sd: float, task_diff_sd: float, effects: Sequence[float] = (0.10, 0.05, 0.02)
) -> list[dict]:
    """Rows {effect, seeds_per_arm, paired_tasks} at alpha = 0.05, power = 0.8.

    Args:
        seed_sd: seed-to-seed sd of one arm's mean score; the difference of two independent arms has
            sd sqrt(2) * seed_sd.
        task_diff_sd: sd over tasks of the per-task difference between two paired systems.
        effects: differences to detect.
    """
    return [
        {
            "effect": effect,
            "seeds_per_arm": required_units(math.sqrt(2) * seed_sd, effect),
            "paired_tasks": required_units(task_diff_sd, effect),
        }
        for effect in effects
    ]


def pass_rate_summary(
    counts: torch.Tensor, n: int, ks: Sequence[int] = (1, 4, 8), seed: int = 0
) -> dict:
    """Task-averaged pass@k for each k <= n, with a task bootstrap interval on pass@1.

    Args:
        counts: [T] successes out of ``n`` per task.
        n: samples per task.
        ks: pass@k values to report; any k > n is skipped.
        seed: bootstrap seed.

    Returns:
        {"pass_at_<k>": float for each kept k, "ci": [lo, hi] for pass@1 (bootstrap of counts / n),
        "per_task": [T] ints, "n": n, "tasks": T}.
    """
    counts = torch.as_tensor(counts)
    summary: dict = {}
    for k in ks:
        if k <= n:
            summary[f"pass_at_{k}"] = float(pass_at_k(n, counts, k).mean())
    lo, hi = bootstrap_ci(counts.to(torch.float64) / n, seed=seed)
    summary["ci"] = [lo, hi]
    summary["per_task"] = [int(c) for c in counts.tolist()]
    summary["n"] = n
    summary["tasks"] = int(counts.shape[0])
    return summary


def degenerate_group_probability(p: float, group_size: int) -> float:
    """Chance that a group of ``group_size`` independent rollouts is all-pass or all-fail: p^G + (1-p)^G.

    Such a group has zero group-relative advantage and contributes no gradient.
    """
    if not 0.0 <= p <= 1.0 or group_size < 1:
        raise ValueError(f"need 0 <= p <= 1 and group_size >= 1, got p={p}, group_size={group_size}")
    return p**group_size + (1 - p) ** group_size
