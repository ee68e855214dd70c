"""How repeatable one policy's evaluation is: pass^k, flip rate, and the noise floor they imply.

pass@k asks whether any of k attempts succeeds; an agent that has to be trusted every time is asked
pass^k (tau-bench): all k of k independent attempts succeed, p^k for a task with success rate p. The
flip rate asks how often a task's outcome changes between two identical single-episode evaluations:
2 p (1 - p). Both are estimated per task from n episodes with c successes by U-statistics over the
episodes, unbiased at every n (tests/test_reliability.py sums each over the binomial distribution):

    pass^k:    C(c, k) / C(n, k)                  (the share of k-subsets that all succeed)
    flip rate: c (n - c) / C(n, 2)                (the share of episode pairs that disagree)

The plug-ins (c/n)^k and 2 (c/n)(1 - c/n) are biased (the first high for k > 1 by Jensen's
inequality, the second low by the factor (n - 1)/n). Task means of both get the Wilson interval over
tasks that pass@1 gets (intervals.task_mean_interval: values in [0, 1]).

The noise floor: two evaluations of the same checkpoint on the same T tasks with n episodes each
(different episode streams) differ in pass@1 by episode noise alone, with variance
sum_t 2 p_t (1 - p_t) / (n T^2) = mean flip rate / (n T). Its 95% bound, 1.96 sqrt(mean flip / (n T)),
is the smallest difference between two such evaluations that is more than noise; two training runs of
one recipe differ by more (their seeds differ too), which `report` adds from the seed spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from bugfix_rl.evaluate.intervals import task_mean_interval

Z_95 = 1.959963984540054  # the two-sided 95% normal quantile


def _counts(n: int, counts) -> torch.Tensor:
    counts = torch.as_tensor(counts).to(torch.float64)
    if counts.dim() != 1 or ((counts < 0) | (counts > n)).any():
        raise ValueError(f"counts must be [T] successes in [0, {n}], got {counts.tolist()}")
    return counts


def pass_hat_k(n: int, counts, k: int) -> torch.Tensor:
    """Unbiased pass^k per task, C(c, k) / C(n, k) = prod_{i<k} (c - i) / (n - i).   [T] -> [T] float64"""
    if not 1 <= k <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n, got k={k}, n={n}")
    counts = _counts(n, counts)
    i = torch.arange(k, dtype=torch.float64)  # [k]
    factors = ((counts[:, None] - i) / (n - i)).clamp_min(0.0)  # [T, k]; a factor below 0 means c < k: 0
    return factors.prod(dim=1)


def flip_rate(n: int, counts) -> torch.Tensor:
    """Unbiased per-task flip rate, c (n - c) / C(n, 2): the chance that two episodes disagree.   [T] -> [T]"""
    if n < 2:
        raise ValueError(f"a flip rate needs n >= 2 episodes per task, got n={n}")
    counts = _counts(n, counts)
    return counts * (n - counts) / (n * (n - 1) / 2)


def evaluation_noise_floor(n: int, counts) -> float:
    """The 95% bound on |pass@1 difference| between two evaluations of one policy on these tasks
    (episode noise only): 1.96 sqrt(mean per-task flip rate / (n T))."""
    flips = flip_rate(n, counts)
    return Z_95 * math.sqrt(float(flips.mean()) / (n * flips.numel()))


def run_noise_floor(seed_sd: float) -> float:
    """The 95% bound on |difference| between two training runs of one recipe whose single-run scores
    have sd `seed_sd` over seeds (episode noise included): 1.96 sqrt(2) seed_sd."""
    return Z_95 * math.sqrt(2.0) * seed_sd


def reliability_summary(counts, n: int, ks: Sequence[int] = (1, 4, 8)) -> dict:
    """eval.json's reliability keys for one policy on T tasks with n episodes each:
    {"pass_hat_k": {"<k>": {"value", "ci"}} for k <= n, "flip_rate": {"value", "ci"} (None at n = 1),
    "noise_floor": evaluation_noise_floor (None at n = 1)}; intervals Wilson over tasks (95%)."""
    out: dict = {"pass_hat_k": {}}
    for k in ks:
        if k <= n:
            mean, lo, hi = task_mean_interval(pass_hat_k(n, counts, k))
            out["pass_hat_k"][str(k)] = {"value": float(mean), "ci": [float(lo), float(hi)]}
    if n >= 2:
        mean, lo, hi = task_mean_interval(flip_rate(n, counts))
        out["flip_rate"] = {"value": float(mean), "ci": [float(lo), float(hi)]}
        out["noise_floor"] = evaluation_noise_floor(n, counts)
    else:
        out["flip_rate"], out["noise_floor"] = None, None
    return out


def reliability_line(summary: dict, tasks: int, n: int) -> str:
    """One printed line: pass^k and the flip rate with their intervals, and the noise floor."""
    if not summary.get("pass_hat_k"):
        return ""
    parts = [f"pass^{k} {v['value']:.3f} [{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]" for k, v in summary["pass_hat_k"].items()]
    if summary.get("flip_rate"):
        flip = summary["flip_rate"]
        parts.append(f"flip rate {flip['value']:.3f} [{flip['ci'][0]:.3f}, {flip['ci'][1]:.3f}]")
        parts.append(f"noise floor {summary['noise_floor']:.3f} (two evaluations of one policy differ by less"
                     f" than this 95% of the time)")
    return "; ".join(parts) + f" ({tasks} tasks x {n} episodes, 95% intervals over tasks)"
