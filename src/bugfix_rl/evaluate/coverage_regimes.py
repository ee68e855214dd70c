"""Warnings for the designs where a printed interval is known to cover less than 0.93 (issue 39).

docs/STATISTICS.md's coverage table holds for the gym-like model of evaluate/coverage.py. Two regimes
outside it under-cover (evaluate/coverage.regime_cells; tests/test_statistics.py re-checks both):

- Wilson over tasks when every task is all-or-nothing (its n episodes all pass or all fail, which one
  episode per task always is): the task mean is then a binomial proportion, and Wilson's binomial
  coverage dips near the ends (0.919 at mean 0.1 over 5 tasks, as low as 0.83-0.85 near a mean of
  about 1/T at any T). `one_policy_warning` says so, with the exact worst case for T.
- `report`'s seeds x tasks interval when the gain sits in one task type of five: T tasks drawn at
  random miss that type entirely with probability 0.8^T, and then no interval built from them can hold
  the gain (the figures are in docs/STATISTICS.md; more seeds make it narrower and worse).
  `arms_design_warning` says so whenever 0.8^T exceeds 5%, i.e. below 14 tasks.

Neither regime can be ruled out from the data alone (an absent task type leaves no trace), so the
warnings are about the design, printed beside the interval; they change no number.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from bugfix_rl.evaluate.intervals import task_mean_interval

CONCENTRATED_TYPES = 5  # the gain sits in one task type of this many
MISS_TOLERANCE = 0.05  # warn when every drawn task misses that type more often than this


@functools.lru_cache(maxsize=64)
def wilson_binomial_coverage(tasks: int, mean: float) -> float:
    """Exact coverage of the Wilson task interval when tasks are all-or-nothing with this mean:
    sum over k ~ Binomial(T, mean) of 1[mean in the interval of k/T]."""
    k = torch.arange(tasks + 1, dtype=torch.float64)
    outcomes = (torch.arange(tasks)[None, :] < k[:, None]).double()  # [T+1, T]: k tasks pass, T - k fail
    _, lo, hi = task_mean_interval(outcomes)
    inside = ((lo <= mean + 1e-12) & (mean - 1e-12 <= hi)).numpy()
    from scipy.stats import binom  # here, not at import: train and eval processes never load scipy.stats

    return float(binom.pmf(k.numpy(), tasks, mean)[inside].sum())


@functools.lru_cache(maxsize=64)
def wilson_worst_case(tasks: int) -> tuple[float, float]:
    """(lowest exact coverage, the mean where it occurs) over means 0.001..0.999 for all-or-nothing tasks."""
    means = np.linspace(0.001, 0.999, 499)
    coverage = [wilson_binomial_coverage(tasks, float(m)) for m in means]
    worst = int(np.argmin(coverage))
    return coverage[worst], float(means[worst])


def one_policy_warning(counts, n: int) -> str | None:
    """A warning when every task is all-or-nothing (each count 0 or n): the Wilson interval over the
    T tasks is then a binomial interval whose coverage can fall well below 95%. None otherwise."""
    counts = torch.as_tensor(counts)
    if counts.numel() == 0 or not bool(((counts == 0) | (counts == n)).all()):
        return None
    tasks = int(counts.numel())
    worst, where = wilson_worst_case(tasks)
    return (f"every task is all-or-nothing ({n} episodes of each agree): the Wilson interval over {tasks} tasks is"
            f" then a binomial interval, which covers as little as {worst:.3f} (at a true mean of {where:.3f};"
            f" docs/STATISTICS.md, 'Where the intervals fail')")


def arms_design_warning(tasks: int) -> str | None:
    """A warning when T tasks drawn at random miss one task type in five with probability > 5%: a gain
    that sits in that type is then often absent from every task, and report's interval cannot hold it."""
    missed = (1 - 1 / CONCENTRATED_TYPES) ** tasks
    if missed <= MISS_TOLERANCE:
        return None
    return (f"{tasks} tasks: a gain that sits in one task type of {CONCENTRATED_TYPES} is absent from all of them"
            f" with probability {missed:.2f}, and the seeds x tasks interval then misses it; more seeds do not help"
            f" (docs/STATISTICS.md, 'Where the intervals fail'); >= 14 tasks bring that below {MISS_TOLERANCE:.0%}")
