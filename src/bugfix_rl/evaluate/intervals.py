"""The 95% intervals `eval`, `train` and `report` print, chosen by a coverage simulation.

Pure functions on float64 tensors. Every function takes any number of leading batch dimensions, so
the coverage simulation (evaluate/coverage.py) runs thousands of simulated evaluations through the
very code that prints the intervals. The estimand is always a mean over the *population* of tasks
(and of training seeds, for arm comparisons): our splits hold 5-10 tasks, and a claim about a recipe
should hold on the next tasks too.

Three intervals, each picked because it covers >= 0.93 at nominal 0.95 in the simulation of a gym
like ours (docs/STATISTICS.md has the table; `python scripts/coverage_table.py` reproduces it),
where the t-interval and the percentile bootstrap do not at T = 5 (0.90 and 0.85: five tasks drawn
from a bimodal difficulty distribution often look alike, so their spread understates the spread of
the population):

- one policy's mean over T tasks: Wilson's score interval with the T tasks as trials. It holds for
  any task rates in [0, 1], because a variable in [0, 1] with mean mu has variance <= mu (1 - mu).
- two policies on the same T tasks: the hull of the paired t-interval and the MOVER interval built
  from the two Wilson intervals and the task-level correlation (Zou & Donner 2008).
- two arms, S_a and S_b seeds each, on the same T tasks: a t-interval whose variance adds the seed
  variance of each arm's mean and the task variance of the seed-averaged per-task differences,
  var_seed(a) / S_a + var_seed(b) / S_b + var_task(d) / T, with Welch-Satterthwaite degrees of
  freedom. The seed-by-task noise enters both the seed and the task term, so the interval is
  slightly conservative; the leaner method-of-moments version under-covered (0.905) at T = 5.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
# scipy.special's quantile functions are the ones scipy.stats.norm.ppf and t.ppf call (the same
# values, checked); importing scipy.stats would add 0.84 s to every command's start (2-core Xeon)
from scipy.special import ndtri, stdtrit


def _f64(values) -> torch.Tensor:
    return torch.as_tensor(values).to(torch.float64)


def t_quantile(level: float, df: torch.Tensor) -> torch.Tensor:
    """Student-t quantile at `level` for each df (float64 tensor of df's shape; df = inf gives z)."""
    df = _f64(df)
    return torch.as_tensor(stdtrit(df.numpy(), level), dtype=torch.float64).reshape(df.shape)


def wilson_interval(mean: torch.Tensor, trials: int, alpha: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Wilson score interval for a mean of `trials` values in [0, 1].

    Args:
        mean: [...] observed means, clamped to [0, 1].
        trials: number of values behind each mean (here: tasks).

    Returns:
        (lo, hi), each [...]: the mu with (mean - mu)^2 <= z^2 mu (1 - mu) / trials.
    """
    mean = _f64(mean).clamp(0.0, 1.0)
    z2 = float(ndtri(1 - alpha / 2)) ** 2
    center = (mean + z2 / (2 * trials)) / (1 + z2 / trials)
    half = (z2 * (mean * (1 - mean) / trials + z2 / (4 * trials**2))).sqrt() / (1 + z2 / trials)
    return (center - half).clamp(min=0.0), (center + half).clamp(max=1.0)


def task_mean_interval(values: torch.Tensor, alpha: float = 0.05) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean over tasks with its Wilson interval.

    Args:
        values: [..., T] one number in [0, 1] per task (a pass rate, a per-task pass@k).

    Returns:
        (mean, lo, hi), each [...].
    """
    values = _f64(values)
    if values.dim() == 0 or values.shape[-1] == 0:
        raise ValueError(f"values must have shape [..., T] with T >= 1, got {tuple(values.shape)}")
    if ((values < 0) | (values > 1) | values.isnan()).any():
        raise ValueError("task values must lie in [0, 1]")
    mean = values.mean(-1)
    lo, hi = wilson_interval(mean, values.shape[-1], alpha)
    return mean, lo, hi


def _correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[..., T] x [..., T] -> [...] Pearson correlation over tasks; 0 where either side is constant."""
    ac, bc = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
    denom = ((ac**2).sum(-1) * (bc**2).sum(-1)).sqrt()
    return torch.where(denom > 0, (ac * bc).sum(-1) / denom.clamp(min=1e-300), torch.zeros_like(denom))


def paired_task_interval(
    a: torch.Tensor, b: torch.Tensor, alpha: float = 0.05
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean of a - b over shared tasks with the hull of the paired-t and the MOVER-Wilson intervals.

    Args:
        a, b: [..., T] per-task values in [0, 1] of two policies on the same tasks (and stream).

    Returns:
        (diff, lo, hi), each [...]. With T = 1 the t part is undefined and only MOVER is used.
    """
    a, b = _f64(a), _f64(b)
    if a.shape != b.shape or a.dim() == 0:
        raise ValueError(f"a and b must give matching [..., T] scores, got {tuple(a.shape)}, {tuple(b.shape)}")
    num_tasks = a.shape[-1]
    mean_a, lo_a, hi_a = task_mean_interval(a, alpha)
    mean_b, lo_b, hi_b = task_mean_interval(b, alpha)
    diff = mean_a - mean_b
    rho = _correlation(a, b)
    # MOVER: each side of the difference from the matching sides of the two Wilson intervals
    lo = diff - ((mean_a - lo_a) ** 2 - 2 * rho * (mean_a - lo_a) * (hi_b - mean_b) + (hi_b - mean_b) ** 2).clamp(min=0).sqrt()
    hi = diff + ((hi_a - mean_a) ** 2 - 2 * rho * (hi_a - mean_a) * (mean_b - lo_b) + (mean_b - lo_b) ** 2).clamp(min=0).sqrt()
    if num_tasks >= 2:
        d = a - b
        half = t_quantile(1 - alpha / 2, torch.tensor(num_tasks - 1.0)) * (d.var(-1) / num_tasks).sqrt()
        lo, hi = torch.minimum(lo, diff - half), torch.maximum(hi, diff + half)
    return diff, lo.clamp(min=-1.0), hi.clamp(max=1.0)  # a difference of two rates lies in [-1, 1]


@dataclass
class ArmDifference:
    """Difference of two arms' mean pass@1 (a - b) with its seed-and-task interval; each field [...]."""

    diff: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    se: torch.Tensor  # standard error of diff
    df: torch.Tensor  # Welch-Satterthwaite degrees of freedom


def arm_difference(a: torch.Tensor, b: torch.Tensor, alpha: float = 0.05) -> ArmDifference:
    """Seed-aware interval for mean(a) - mean(b) of two arms evaluated on the same tasks.

    Args:
        a: [..., S_a, T] per-seed, per-task pass rates of arm a (S_a >= 2 seeds, T >= 2 tasks).
        b: [..., S_b, T] the same for arm b; seeds need not be paired with a's.

    Variance: var_seed(a) / S_a + var_seed(b) / S_b + var_task(d) / T, where var_seed is the variance
    over seeds of the per-seed means and d [T] the seed-averaged per-task differences (which cancels
    the tasks' shared difficulty). Degrees of freedom by Welch-Satterthwaite over the three terms.
    """
    a, b = _f64(a), _f64(b)
    if a.dim() < 2 or b.dim() < 2 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"a and b must be [..., S, T] on the same tasks, got {tuple(a.shape)}, {tuple(b.shape)}")
    seeds_a, seeds_b, num_tasks = a.shape[-2], b.shape[-2], a.shape[-1]
    if min(seeds_a, seeds_b) < 2 or num_tasks < 2:
        raise ValueError(f"need >= 2 seeds per arm and >= 2 tasks, got {seeds_a}, {seeds_b} seeds, {num_tasks} tasks")
    task_diffs = a.mean(-2) - b.mean(-2)  # [..., T]
    terms = [(a.mean(-1).var(-1) / seeds_a, seeds_a), (b.mean(-1).var(-1) / seeds_b, seeds_b),
             (task_diffs.var(-1) / num_tasks, num_tasks)]  # ([...] variance term, its units)
    return _welch_interval(task_diffs.mean(-1), terms, a, b, alpha)


def _welch_interval(diff: torch.Tensor, terms: list, a: torch.Tensor, b: torch.Tensor, alpha: float) -> ArmDifference:
    """The t-interval around `diff` [...] whose variance is the sum of `terms` ([...] term, the units it was
    averaged over), degrees of freedom by Welch-Satterthwaite; a, b: the [..., S, T] rates it came from."""
    variance = sum(term for term, _ in terms)
    pieces = sum(term**2 / (units - 1) for term, units in terms)
    df = torch.where(pieces > 0, variance**2 / pieces.clamp(min=1e-300), torch.full_like(variance, float("inf")))
    se = variance.sqrt()
    half = t_quantile(1 - alpha / 2, df) * se
    lo, hi = (diff - half).clamp(min=-1.0), (diff + half).clamp(max=1.0)
    # no spread to measure (every cell constant: two arms pinned at 0 or 1; or, paired, every seed's and
    # task's mean difference equal), which is not certainty: fall back on the interval over the
    # seed-averaged tasks, which bounds the spread instead
    _, task_lo, task_hi = paired_task_interval(a.mean(-2), b.mean(-2), alpha)
    degenerate = variance == 0
    return ArmDifference(diff, torch.where(degenerate, task_lo, lo), torch.where(degenerate, task_hi, hi), se, df)


def paired_arm_difference(a: torch.Tensor, b: torch.Tensor, alpha: float = 0.05) -> ArmDifference:
    """Seed-aware interval for mean(a - b) when each seed of a is paired with the same seed of b.

    Args:
        a: [..., S, T] per-seed, per-task pass rates of arm a (S >= 2 seeds, T >= 2 tasks or templates).
        b: [..., S, T] the same for arm b, row s the same seed as a's row s (for example one run read at two
            steps: what it shares up to the earlier one cancels).

    With d = a - b, variance: var_seed(d's per-seed means) / S + var_task(d's per-task means) / T. Under
    d[s, t] = mu + seed[s] + task[t] + noise[s, t] each term holds the noise's share once, so the sum
    counts it twice and errs wide. Degrees of freedom by Welch-Satterthwaite over the two terms.
    """
    a, b = _f64(a), _f64(b)
    if a.dim() < 2 or a.shape != b.shape:
        raise ValueError(f"a and b must be [..., S, T] of the same seeds and tasks, got {tuple(a.shape)}, {tuple(b.shape)}")
    num_seeds, num_tasks = a.shape[-2], a.shape[-1]
    if num_seeds < 2 or num_tasks < 2:
        raise ValueError(f"need >= 2 paired seeds and >= 2 tasks, got {num_seeds} seeds, {num_tasks} tasks")
    d = a - b  # [..., S, T]
    terms = [(d.mean(-1).var(-1) / num_seeds, num_seeds), (d.mean(-2).var(-1) / num_tasks, num_tasks)]
    return _welch_interval(d.mean((-2, -1)), terms, a, b, alpha)
