"""The malformed-call alarm (run/alarms.py) on hand-computed rows, and the stop rules it and the interval
gain feed (run/stopping.py), issue 39."""

from __future__ import annotations

import math

import pytest

from bugfix_rl.run.alarms import malformed_alarm, malformed_alarm_line, malformed_trend
from bugfix_rl.config import StopConfig
from bugfix_rl.run.stopping import stop_reason, validation_stalled


def rows_of(values) -> list[dict]:
    return [{"step": step, "malformed": value} for step, value in enumerate(values)]


def test_trend_by_hand():
    # x centred = -1.5, -0.5, 0.5, 1.5 (sxx 5); values 0.2, 0.4, 0.5, 0.9: mean 0.5
    # slope = (-1.5 * -0.3 + -0.5 * -0.1 + 0 + 1.5 * 0.4) / 5 = 1.1 / 5 = 0.22
    # fitted 0.17, 0.39, 0.61, 0.83 -> residuals 0.03, 0.01, -0.11, 0.07; sum of squares 0.018; / 2 df = 0.009
    # se = sqrt(0.009 / 5) = 0.042426; t = 5.185
    slope, t = malformed_trend(rows_of([0.2, 0.4, 0.5, 0.9]), 4)
    assert slope == pytest.approx(0.22)
    assert t == pytest.approx(0.22 / math.sqrt(0.009 / 5))
    assert malformed_trend(rows_of([0.2, 0.4, 0.5, 0.9]), 5) is None  # fewer rows than the window
    assert malformed_trend(rows_of([0.1, 0.2, 0.3]), 3) == (pytest.approx(0.1), math.inf)  # a straight line
    assert malformed_trend([{"step": 0}, {"step": 1}, {"step": 2}], 3) is None  # no malformed key (no tools)


def test_the_alarm_needs_a_rise_and_a_significant_slope():
    rising = rows_of([0.2, 0.4, 0.5, 0.9])  # rises 0.88 over 4 steps, t 5.2
    assert malformed_alarm(rising, 4, rise=0.5) == {"malformed_trend": pytest.approx(0.22), "malformed_alarm": 1.0}
    assert malformed_alarm(rising, 4, rise=1.0)["malformed_alarm"] == 0.0  # 0.88 < 1.0
    noisy = rows_of([0.2, 0.9, 0.1, 0.8, 0.3, 1.0])  # up on average, but mostly scatter
    slope, t = malformed_trend(noisy, 6)
    assert slope * 6 > 0.2 and t < 2 and malformed_alarm(noisy, 6, rise=0.2)["malformed_alarm"] == 0.0
    falling = rows_of([0.9, 0.5, 0.4, 0.2])
    assert malformed_alarm(falling, 4, rise=0.1)["malformed_alarm"] == 0.0
    assert malformed_alarm(rising, 0, rise=0.1) == {"malformed_trend": None, "malformed_alarm": 0.0}
    row = {**rising[-1], **malformed_alarm(rising, 4, rise=0.5)}
    assert malformed_alarm_line(row, 4).startswith("warning: malformed tool calls are rising at step 3: +0.220")


def test_the_interval_gain_asks_for_more_than_the_best_checkpoints_noise():
    validation = {0: {"pass_at_1": 0.2, "ci": [0.05, 0.50]}, 10: {"pass_at_1": 0.45, "ci": [0.2, 0.7]},
                  20: {"pass_at_1": 0.6, "ci": [0.3, 0.85]}}
    # point: step 20's 0.6 beats step 10's 0.45, so no stall; interval: 0.6 is inside step 10's [0.2, 0.7]
    assert not validation_stalled(validation, patience=1)
    assert validation_stalled(validation, patience=1, gain="interval")
    assert not validation_stalled({**validation, 20: {"pass_at_1": 0.75, "ci": [0.4, 0.9]}}, 1, gain="interval")
    assert validation_stalled({**validation, 20: {"pass_at_1": 0.75, "ci": [0.4, 0.9]}}, 1, 0.1, gain="interval")
    # patience 2: steps 10 and 20 against step 0's interval [0.05, 0.50]: 0.6 is beyond it
    assert not validation_stalled(validation, patience=2, gain="interval")
    reason = stop_reason(StopConfig(patience=1, gain="interval"), validation, [], True)
    assert reason == ("validation: no gain over step 10's pass@1 0.450 beyond its 95% interval (upper 0.700) for"
                      " 1 checkpoints")
    with pytest.raises(ValueError, match="valid: point, interval"):
        validation_stalled(validation, 1, gain="median")


def test_the_malformed_alarm_stops_a_run_only_when_asked():
    row = {"step": 7, "malformed": 0.9, "malformed_trend": 0.05, "malformed_alarm": 1.0}
    assert stop_reason(StopConfig(), {}, [row], False) is None  # a warning by default
    assert stop_reason(StopConfig(malformed_stop=True), {}, [row], False).startswith(
        "malformed tool calls rising: +0.050 per episode per step over the last 20 steps")
    assert stop_reason(StopConfig(malformed_stop=True), {}, [{**row, "malformed_alarm": 0.0}], False) is None


def test_a_run_logs_the_trend_and_stops_on_the_interval_rule(tmp_path):
    """+exp=smoke, 4 steps, a checkpoint every 3: the malformed trend is logged from the third step on;
    at step 3 the checkpoint is not beyond step 0's interval, so gain=interval ends the run there."""
    import json

    from in_process import cli_result

    result = cli_result("train", "+exp=smoke", "steps=4", "preflight=false", "threads=1", "eval.test=false",
                        "eval.ckpt_every=3", "stop.patience=1", "stop.gain=interval", "stop.malformed_window=3",
                        "logger.console=false", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["malformed_trend"] is None for row in rows] == [True, True, False]
    assert all(row["malformed_alarm"] in (0.0, 1.0) for row in rows)
    out = json.loads((tmp_path / "eval.json").read_text())
    assert out["stop"]["stopped_at"] == 3 and "beyond its 95% interval" in out["stop"]["reason"]
    assert out["train"]["malformed_alarm_steps"] == [row["step"] for row in rows if row["malformed_alarm"]]
