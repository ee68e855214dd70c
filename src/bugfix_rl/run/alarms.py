"""The malformed-call alarm (issue 39): malformed tool calls per episode trending up over recent steps.

In tools training the malformed calls per episode have risen from 0.27 to 0.91 while the reward rose,
and verl users report that rising malformed calls precede multi-turn collapse. The alarm fits a
least-squares line through the dashboard's `malformed` (mean malformed calls per episode) over the last
`stop.malformed_window` steps and fires when the line rises by at least `stop.malformed_rise` over the
window and the slope is more than noise (its t statistic above 2: residual scatter, window - 2 df).
The trainer logs `malformed_trend` (slope per step) and `malformed_alarm` (0/1) every step, prints a
line when the alarm turns on, the dashboard shades its steps, and `stop.malformed_stop=true` makes it a
stop rule (run/stopping.stop_reason). Pure functions of the rows.
"""

from __future__ import annotations

T_ALARM = 2.0  # the slope's t statistic above which a rise counts as more than noise


def mismatch_alarm(row: dict, threshold: float) -> dict:
    """The sampler-policy mismatch alarm (design review question 16): kl_mu_prox_alarm is 1.0 when the
    row's kl_mu_prox, KL(mu || pi_prox) per policy token (algo/update.py), exceeds `threshold`
    (stop.kl_mu_prox_max; 0 = no alarm), else 0.0."""
    value = row.get("kl_mu_prox")
    return {"kl_mu_prox_alarm": float(threshold > 0 and value is not None and value > threshold)}


def mismatch_alarm_line(row: dict, threshold: float) -> str:
    """The console's warning when the mismatch alarm turns on."""
    return (f"warning: the sampler and the trainer's policy disagree at step {row['step']}: KL(mu || pi_prox)"
            f" {row['kl_mu_prox']:.3g} per policy token > stop.kl_mu_prox_max={threshold:g}; stale or mismatched"
            f" samples (algo.tis_cap corrects them, algo.max_traj_gap drops the worst; stop.kl_mu_prox_stop=true"
            f" ends the run here)")


def malformed_trend(rows: list[dict], window: int) -> tuple[float, float] | None:
    """(slope per step, its t statistic) of a least-squares line through `malformed` over the last
    `window` rows; None with fewer than max(window, 3) rows or a row without the key. A perfectly
    straight rising line has t = inf."""
    if window < 3 or len(rows) < window:
        return None
    values = [row.get("malformed") for row in rows[-window:]]
    if any(value is None for value in values):
        return None
    x = [i - (window - 1) / 2 for i in range(window)]  # steps, centred
    mean = sum(values) / window
    sxx = sum(xi * xi for xi in x)
    slope = sum(xi * (v - mean) for xi, v in zip(x, values)) / sxx
    residual = sum((v - mean - slope * xi) ** 2 for xi, v in zip(x, values)) / (window - 2)
    se = (residual / sxx) ** 0.5
    if se <= 1e-12:  # a straight line (up to rounding)
        return slope, (float("inf") if slope > 0 else float("-inf") if slope < 0 else 0.0)
    return slope, slope / se


def malformed_alarm(rows: list[dict], window: int, rise: float) -> dict:
    """The newest row's alarm keys: malformed_trend (slope per step; None before `window` rows or with
    window 0) and malformed_alarm (1.0 when slope x window >= rise and t > T_ALARM, else 0.0)."""
    trend = malformed_trend(rows, window)
    if trend is None:
        return {"malformed_trend": None, "malformed_alarm": 0.0}
    slope, t = trend
    return {"malformed_trend": slope, "malformed_alarm": float(slope * window >= rise and t > T_ALARM)}


def malformed_alarm_line(row: dict, window: int) -> str:
    """The console's warning when the alarm turns on."""
    return (f"warning: malformed tool calls are rising at step {row['step']}: {row['malformed_trend']:+.3f} per episode"
            f" per step over the last {window} steps (now {row['malformed']:.2f} per episode); rising malformed"
            f" calls precede multi-turn collapse (stop.malformed_stop=true ends the run here)")
