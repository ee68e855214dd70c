"""Sample sizes and detectable effects for comparing recipes (`bugfix-rl plan`, `report`'s MDE column).

Two levels of detail:

- the book's power table (§19.9): one seed sd and one per-task-difference sd give seeds per arm and
  paired tasks, by a z-test (`stats.required_units`, the book's numbers) or by a t-test with the
  noncentral t (`required_units_t`; at 3-12 units the t answer is larger);
- a design from a pilot sweep: the variance of the arm difference that `report` prints is split into
  seed, task-interaction, seed-by-task and episode parts (`VarianceComponents`), so one can ask how
  many seeds a given number of tasks and episodes needs (`seeds_needed`) or what an existing sweep
  can detect (`minimum_detectable_effect`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy.special import stdtrit  # scipy.stats' t.ppf, without importing scipy.stats at start-up (0.84 s)

from bugfix_rl.evaluate.stats import required_units

MAX_UNITS = 100_000


def t_test_power(effect: float, se: float, df: float, alpha: float = 0.05) -> float:
    """Power of a two-sided t-test at `alpha` when the estimate has standard error `se` and `df`
    degrees of freedom: P(|T'| > t_crit) for T' noncentral t with noncentrality effect / se."""
    if se <= 0:
        return 1.0 if effect != 0 else alpha
    from scipy.stats import nct  # only here: `bugfix-rl eval` imports this module and needs no power

    critical = stdtrit(df, 1 - alpha / 2)
    noncentrality = abs(effect) / se
    if noncentrality - critical > 12:  # power within 1e-20 of 1
        return 1.0
    # P(T' > c) + P(T' < -c), the second as the upper tail of the mirrored variable: scipy's nct.cdf far in
    # the lower tail returns NaN for noncentralities near 8, the sf form does not
    power = float(nct.sf(critical, df, noncentrality) + nct.sf(critical, df, -noncentrality))
    if power != power:
        raise ValueError(f"power is not computable for effect={effect}, se={se}, df={df}")
    return power


def required_units_t(unit_sd: float, effect: float, two_arms: bool, alpha: float = 0.05,
                     power: float = 0.8) -> int | None:
    """Smallest n (>= 2) whose t-test reaches `power`, or None if none up to MAX_UNITS does.

    Args:
        unit_sd: for two_arms, the seed-to-seed sd of one arm's mean (two arms of n seeds: se =
            unit_sd sqrt(2 / n), df = 2n - 2); otherwise the sd of the per-task differences of a
            paired comparison (se = unit_sd / sqrt(n), df = n - 1).
    """
    if unit_sd <= 0 or effect == 0:
        raise ValueError(f"need unit_sd > 0 and effect != 0, got unit_sd={unit_sd}, effect={effect}")

    def reaches(n: int) -> bool:
        se = unit_sd * math.sqrt(2 / n) if two_arms else unit_sd / math.sqrt(n)
        return t_test_power(effect, se, 2 * n - 2 if two_arms else n - 1, alpha) >= power

    lo, hi = 2, 2  # power grows with n: double until it is reached, then bisect for the first n
    while not reaches(hi):
        if hi >= MAX_UNITS:
            return None
        lo, hi = hi + 1, min(2 * hi, MAX_UNITS)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid + 1, hi)
    return lo


def units_needed(sd: float, effect: float, two_arms: bool, test: str = "t", alpha: float = 0.05,
                 power: float = 0.8) -> int | None:
    """Seeds per arm (two_arms; `sd` the seed sd of one arm's mean) or paired tasks (`sd` of the per-task
    differences) that detect `effect`: by the noncentral t (test 't') or the book's z-test ('z', where
    two arm means differ with sd sqrt(2) * sd)."""
    if test == "z":
        return required_units(math.sqrt(2) * sd if two_arms else sd, effect, alpha, power)
    return required_units_t(sd, effect, two_arms, alpha, power)


def minimum_detectable_effect(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true difference a two-sided t-test at `alpha` detects with `power` given this se and
    df: (t_{1 - alpha/2, df} + t_{power, df}) se (the normal-shift approximation with t quantiles)."""
    return float((stdtrit(df, 1 - alpha / 2) + stdtrit(df, power)) * se)


@dataclass
class VarianceComponents:
    """Variance parts of one seed's per-task pass rate (pass-rate scale), measured on a pilot sweep.

    seed: the seed-to-seed variance of an arm's true mean; interaction: the variance over tasks of the
    true per-task difference between two close arms; seed_task: seed-by-task variance beyond episode
    noise; episode: the binomial episode variance of one per-task rate at `episodes` episodes.
    """

    seed: float
    interaction: float
    seed_task: float
    episode: float
    episodes: int

    def residual(self, episodes: int) -> float:
        """seed-by-task plus episode variance of one (seed, task) rate at `episodes` episodes."""
        return self.seed_task + self.episode * self.episodes / episodes


def _residual_ms(rates: torch.Tensor) -> tuple[float, int]:
    """Two-way (seed x task) residual sum of squares of [S, T] rates and its degrees of freedom."""
    centred = rates - rates.mean(0, keepdim=True) - rates.mean(1, keepdim=True) + rates.mean()
    return float((centred**2).sum()), (rates.shape[0] - 1) * (rates.shape[1] - 1)


def variance_components(arms: dict[str, torch.Tensor], reference: str, episodes: int) -> VarianceComponents:
    """Method-of-moments components from a pilot sweep.

    Args:
        arms: arm -> [S, T] per-seed, per-task pass rates, all on the same T tasks; arms with one
            seed only add to the interaction estimate.
        reference: the arm the others are compared with; the interaction is measured between it and
            the arm whose mean is closest to it (a near-null pair, as in the book).
        episodes: episodes behind each rate.
    """
    multi = {a: r.to(torch.float64) for a, r in arms.items() if r.shape[0] >= 2}
    if not multi:
        raise ValueError("a pilot needs an arm with >= 2 seeds to measure seed variance")
    num_tasks = next(iter(arms.values())).shape[1]
    squares, dof = zip(*(_residual_ms(r) for r in multi.values()))
    residual = sum(squares) / max(sum(dof), 1)
    seed = sum(max(0.0, float(r.mean(1).var()) - residual / num_tasks) for r in multi.values()) / len(multi)
    cells = torch.cat([r.flatten() for r in multi.values()])
    episode = float((cells * (1 - cells)).mean()) / max(episodes - 1, 1)  # unbiased p(1-p)/n per rate
    ref = arms[reference].to(torch.float64)
    others = [a for a in arms if a != reference]
    interaction = 0.0
    if others:
        closest = min(others, key=lambda a: abs(float(arms[a].mean() - ref.mean())))
        other = arms[closest].to(torch.float64)
        diffs = other.mean(0) - ref.mean(0)  # [T]
        interaction = max(0.0, float(diffs.var()) - residual * (1 / other.shape[0] + 1 / ref.shape[0]))
    return VarianceComponents(seed, interaction, max(0.0, residual - episode), episode, episodes)


def design_variance(parts: VarianceComponents, seeds: int, tasks: int, episodes: int) -> tuple[float, float]:
    """Expected variance and Welch-Satterthwaite df of the interval `report` prints
    (intervals.arm_difference) for two arms of `seeds` seeds on `tasks` tasks x `episodes` episodes."""
    residual = parts.residual(episodes)
    seed_term = (parts.seed + residual / tasks) / seeds  # E[var_seed(arm) / S], each arm
    task_term = (parts.interaction + 2 * residual / seeds) / tasks  # E[var_task(d) / T]
    variance = 2 * seed_term + task_term
    pieces = 2 * seed_term**2 / (seeds - 1) + task_term**2 / (tasks - 1)
    return variance, (variance**2 / pieces if pieces > 0 else float("inf"))


def seeds_needed(parts: VarianceComponents, tasks: int, episodes: int, effect: float, alpha: float = 0.05,
                 power: float = 0.8, max_seeds: int = 1000) -> int | None:
    """Fewest seeds per arm (>= 2) that detect `effect` with `power`; None if max_seeds do not (the
    task-interaction term does not shrink with seeds: more tasks are then the only way)."""
    for seeds in range(2, max_seeds + 1):
        variance, df = design_variance(parts, seeds, tasks, episodes)
        if t_test_power(effect, math.sqrt(variance), df, alpha) >= power:
            return seeds
    return None
