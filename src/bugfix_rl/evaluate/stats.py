"""Evaluation statistics: pass@k and its curve, episode-level paired tests, bootstraps, z power.

Pure functions on tensors and floats; no env, model or config objects. pass@k is estimated per task
with the unbiased combinatorial estimator and averaged over tasks. The intervals we print live in
evaluate/intervals.py (chosen by a coverage simulation); the percentile bootstraps here are kept as
the comparison that simulation reports (they under-cover at 5 tasks) and for the book's examples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from scipy.special import ndtri  # scipy.stats.norm.ppf's function, without importing scipy.stats (0.84 s)

from bugfix_rl.evaluate.intervals import paired_task_interval, task_mean_interval
from bugfix_rl.evaluate.coverage_regimes import one_policy_warning
from bugfix_rl.evaluate.reliability import reliability_summary


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


def pass_at_k_curve(n: int, counts: torch.Tensor) -> list[float]:
    """Task-averaged pass@k for every k = 1..n ([n] floats): the curve of design-review question 24.

    RL that sharpens a policy raises pass@1 and can lower pass@k at large k (less coverage of the
    solution space); two policies' curves crossing is that trade-off made visible.
    """
    return [float(pass_at_k(n, counts, k).mean()) for k in range(1, n + 1)]


def mcnemar(a_passed: torch.Tensor, b_passed: torch.Tensor) -> dict:
    """Two checkpoints on the same episodes (same tasks, same seeded stream): paired SE and McNemar.

    Args:
        a_passed, b_passed: [N] 0/1 outcomes of the same N episodes (episode i of a pairs with
            episode i of b).

    Returns:
        {"episodes", "a_only", "b_only", "diff" (pass rate a - b), "se" (paired standard error
        sqrt(a_only + b_only - (a_only - b_only)^2 / N) / N), "unpaired_se" (as if the runs were
        independent), "z" (diff / se), "p_exact" (two-sided exact binomial test of the discordant
        pairs, a_only ~ Binomial(a_only + b_only, 1/2) under no difference)}.

    Only discordant episodes carry information; the test is about these episodes' tasks, not about
    new tasks (for that, use the task-level interval).
    """
    a, b = torch.as_tensor(a_passed).flatten(), torch.as_tensor(b_passed).flatten()
    if a.shape != b.shape or a.numel() == 0:
        raise ValueError(f"need the same N >= 1 episodes for both, got {a.numel()} and {b.numel()}")
    if not all(bool(((x == 0) | (x == 1)).all()) for x in (a, b)):
        raise ValueError("outcomes must be 0 or 1")
    a, b = a.to(torch.int64), b.to(torch.int64)
    n = a.numel()
    a_only, b_only = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    diff = (a_only - b_only) / n
    se = math.sqrt(max(a_only + b_only - (a_only - b_only) ** 2 / n, 0.0)) / n
    rate_a, rate_b = float(a.double().mean()), float(b.double().mean())
    unpaired_se = math.sqrt(rate_a * (1 - rate_a) / n + rate_b * (1 - rate_b) / n)
    discordant = a_only + b_only
    from scipy.stats import binom  # only here: scipy.stats costs 0.84 s to import

    p_exact = 1.0 if discordant == 0 else min(1.0, 2 * float(binom.cdf(min(a_only, b_only), discordant, 0.5)))
    return {"episodes": n, "a_only": a_only, "b_only": b_only, "diff": diff, "se": se, "unpaired_se": unpaired_se,
            "z": diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff)), "p_exact": p_exact}


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

    The quantiles are the normal's (scipy.special.ndtri) rounded to 2 decimals (1.96 and 0.84 at the
    defaults). That is the convention of the book's power table; with the exact sum 2.8016 the
    table's 141 / 881 paired tasks would become 142 / 882.
    """
    if sd <= 0 or effect == 0:
        raise ValueError(f"need sd > 0 and effect != 0, got sd={sd}, effect={effect}")
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    z_alpha = round(float(ndtri(1 - alpha / 2)), 2)
    z_power = round(float(ndtri(power)), 2)
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
    counts: torch.Tensor, n: int, ks: Sequence[int] = (1, 4, 8)
) -> dict:
    """Task-averaged pass@k for each k <= n, with the Wilson task interval on pass@1.

    Args:
        counts: [T] successes out of ``n`` per task.
        n: samples per task.
        ks: pass@k values to report; any k > n is skipped.

    Returns:
        {"pass_at_<k>": float for each kept k, "ci": [lo, hi] for pass@1 (intervals.task_mean_interval),
        "per_task": [T] ints, "n": n, "tasks": T}, and reliability.reliability_summary's "pass_hat_k",
        "flip_rate" and "noise_floor"; "interval_warning": coverage_regimes.one_policy_warning (None
        unless every task is all-or-nothing, where Wilson under-covers).
    """
    counts = torch.as_tensor(counts)
    summary: dict = {}
    for k in ks:
        if k <= n:
            summary[f"pass_at_{k}"] = float(pass_at_k(n, counts, k).mean())
    _, lo, hi = task_mean_interval(counts.to(torch.float64) / n)
    summary["ci"] = [float(lo), float(hi)]
    summary["per_task"] = [int(c) for c in counts.tolist()]
    summary["n"] = n
    summary["tasks"] = int(counts.shape[0])
    summary.update(reliability_summary(counts, n, ks))
    summary["interval_warning"] = one_policy_warning(counts, n)
    return summary


def paired_summary(a_counts: Sequence[int], b_counts: Sequence[int], n: int) -> dict:
    """a - b in pass@1 over shared tasks (counts out of n each), with intervals.paired_task_interval:
    {"diff", "ci": [lo, hi], "tasks", "per_task": [T] differences}."""
    rate_a = torch.as_tensor(a_counts, dtype=torch.float64) / n  # [T]
    rate_b = torch.as_tensor(b_counts, dtype=torch.float64) / n
    diff, lo, hi = paired_task_interval(rate_a, rate_b)
    return {"diff": float(diff), "ci": [float(lo), float(hi)], "tasks": int(rate_a.numel()),
            "per_task": (rate_a - rate_b).tolist()}


def _templates(names: Sequence[str]) -> list[str]:
    """Each task's template: a generated task's name is its template's, then '-' and a hash
    (gym/generator.template_id)."""
    return [name.rsplit("-", 1)[0] for name in names]


def several_per_template(names: Sequence[str]) -> bool:
    """Whether the tasks group into two templates or more, one of them with two tasks or more (a generated
    split): only then does an interval over templates differ from the one over tasks."""
    return 2 <= template_count(names) < len(names)


def template_count(names: Sequence[str]) -> int:
    """How many templates the tasks come from."""
    return len(set(_templates(names)))


def template_means(rates: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
    """[..., T] per-task values -> [..., K]: each template's tasks averaged, templates in order of first
    appearance."""
    if not names or len(names) != rates.shape[-1]:
        raise ValueError(f"{len(names)} task names for {rates.shape[-1]} tasks")
    keys = _templates(names)
    columns = [[i for i, key in enumerate(keys) if key == t] for t in dict.fromkeys(keys)]
    return torch.stack([rates[..., cols].mean(-1) for cols in columns], -1)


def paired_summary_over_templates(a_counts: Sequence[int], b_counts: Sequence[int], n: int,
                                  names: Sequence[str]) -> dict | None:
    """a - b in pass@1 with each template's tasks averaged into one unit, with paired_task_interval over
    the templates: {"diff", "ci": [lo, hi], "templates"}; None unless several_per_template(names). Tasks of
    one template move together, so for a claim about new shapes this is the interval (docs/STATISTICS.md,
    "Where the intervals fail"); its mean weighs the templates alike."""
    rate_a = torch.as_tensor(a_counts, dtype=torch.float64) / n  # [T]
    rate_b = torch.as_tensor(b_counts, dtype=torch.float64) / n
    units_a, units_b = template_means(rate_a, names), template_means(rate_b, names)  # [K]
    if not several_per_template(names):
        return None
    diff, lo, hi = paired_task_interval(units_a, units_b)
    return {"diff": float(diff), "ci": [float(lo), float(hi)], "templates": int(units_a.numel())}


def gain_kept(heldout_diff: dict, shapes_diff: dict) -> dict:
    """The share of a run's held-out gain (chosen - start) that it keeps on the `shapes` tasks.

    Args:
        heldout_diff, shapes_diff: paired_summary outputs (chosen - start on each split).

    Returns:
        {"share": shapes gain / held-out gain, None unless the held-out gain is > 0 (a share of a loss
        or of nothing is not one), "heldout": [diff, lo, hi], "shapes": [diff, lo, hi]}.

    No interval for the share: the two gains are measured on disjoint tasks with intervals that are
    hulls of two methods (paired_task_interval), which give no standard error to carry through a
    ratio (Fieller or the delta method), and no helper here bootstraps a ratio. The two paired
    intervals are returned instead; where the held-out one includes 0 the share means little.
    """
    heldout, shapes = heldout_diff["diff"], shapes_diff["diff"]
    return {"share": shapes / heldout if heldout > 0 else None,
            "heldout": [heldout, *heldout_diff["ci"]], "shapes": [shapes, *shapes_diff["ci"]]}


def degenerate_group_probability(p: float, group_size: int) -> float:
    """Chance that a group of ``group_size`` independent rollouts is all-pass or all-fail: p^G + (1-p)^G.

    Such a group has zero group-relative advantage and contributes no gradient.
    """
    if not 0.0 <= p <= 1.0 or group_size < 1:
        raise ValueError(f"need 0 <= p <= 1 and group_size >= 1, got p={p}, group_size={group_size}")
    return p**group_size + (1 - p) ** group_size
