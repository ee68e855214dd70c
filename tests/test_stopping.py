"""The collapse alarm (stopping.collapse_reason, stop.collapse): hand-made rows, then a real run at
lr=1e3, where the policy goes deterministic after one step (entropy 0, reward 0) and used to finish as
`complete` without a word. (The other stop rules: tests/test_statistics.py.)"""

from __future__ import annotations

import json

from bugfix_rl import cli
from bugfix_rl.config import StopConfig
from bugfix_rl.run.stopping import collapse_alarm, collapse_reason, stop_reason


def rows_of(**series) -> list[dict]:
    """Dashboard rows from equal-length series: rows_of(entropy=[...], reward=[...])."""
    length = len(next(iter(series.values())))
    return [{"step": i, **{key: values[i] for key, values in series.items()}} for i in range(length)]


def test_entropy_near_zero_with_a_flat_or_falling_reward_is_a_collapse():
    falling = rows_of(entropy=[0.5, 0.005, 0.0, 0.001], reward=[0.4, 0.3, 0.3, 0.2], pass_rate=[0.4, 0.3, 0.3, 0.2])
    assert collapse_reason(falling, window=3, entropy_floor=0.01) == (
        "policy collapse: entropy below 0.01 for 3 steps while the reward went 0.300 -> 0.200")
    assert collapse_reason(falling, window=4, entropy_floor=0.01) is None  # step 0's entropy 0.5 is above
    assert collapse_reason(falling[:2], window=3, entropy_floor=0.01) is None  # fewer steps than the window
    assert collapse_reason(falling, window=0, entropy_floor=0.01) is None  # 0: never
    flat = rows_of(entropy=[0.0] * 3, reward=[0.0] * 3, pass_rate=[0.0] * 3)
    assert "reward went 0.000 -> 0.000" in collapse_reason(flat, 3, 0.01)


def test_a_sure_policy_that_improves_or_solves_everything_is_not_a_collapse():
    rising = rows_of(entropy=[0.0] * 3, reward=[0.2, 0.3, 0.5], pass_rate=[0.2, 0.3, 0.5])
    assert collapse_reason(rising, 3, 0.01) is None
    solved = rows_of(entropy=[0.0] * 3, reward=[1.0] * 3, pass_rate=[1.0] * 3)
    assert collapse_reason(solved, 3, 0.01) is None
    warm = rows_of(entropy=[0.02] * 3, reward=[0.1] * 3, pass_rate=[0.1] * 3)
    assert collapse_reason(warm, 3, 0.01) is None


def test_a_zero_gradient_is_a_collapse_only_when_some_group_had_an_advantage():
    dead = rows_of(entropy=[1.0] * 3, reward=[0.5] * 3, grad_norm=[0.0] * 3, zero_adv_frac=[0.5, 0.25, 0.5])
    assert collapse_reason(dead, 3, 0.01) == "policy collapse: gradient exactly 0 for 3 steps although groups had advantages"
    no_signal = rows_of(entropy=[1.0] * 3, reward=[0.0] * 3, grad_norm=[0.0] * 3, zero_adv_frac=[1.0] * 3)
    assert collapse_reason(no_signal, 3, 0.01) is None  # all-equal groups: signal_spent's business
    alive = rows_of(entropy=[1.0] * 3, reward=[0.5] * 3, grad_norm=[0.0, 1e-9, 0.0], zero_adv_frac=[0.5] * 3)
    assert collapse_reason(alive, 3, 0.01) is None


def test_the_setting_chooses_warn_stop_or_off():
    flat = rows_of(entropy=[0.0] * 3, reward=[0.0] * 3, pass_rate=[0.0] * 3)
    assert collapse_alarm(StopConfig(), flat) is not None  # warn by default
    assert stop_reason(StopConfig(), {}, flat, False) is None  # ... which does not end the run
    assert collapse_alarm(StopConfig(collapse="off"), flat) is None
    reason = stop_reason(StopConfig(collapse="stop"), {}, flat, False)
    assert reason.startswith("policy collapse: entropy below 0.01") and reason.endswith("(stop.collapse=stop)")


def test_the_alarm_fires_on_a_run_at_lr_1e3_and_can_stop_it(tmp_path, capsys):
    cli.main(["train", "+exp=smoke", "algo.lr=1e3", "steps=6", "stop.collapse=stop", "threads=1",
              "preflight=false", "eval.test=false", "eval.n_val=1", "eval.ckpt_every=0",
              f"hydra.run.dir={tmp_path}"])
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["entropy"] for r in rows[1:]] == [0.0, 0.0, 0.0]  # deterministic from step 1 ...
    assert [r["collapse_alarm"] for r in rows] == [0.0, 0.0, 0.0, 1.0]  # ... so the alarm fires at step 3
    err = capsys.readouterr().err
    assert "warning: step 3: policy collapse: entropy below 0.01 for 3 steps while the reward went" in err
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["train"]["collapse_alarm_steps"] == [3]
    assert result["stop"]["stopped_at"] == 4 and result["stop"]["reason"].endswith("(stop.collapse=stop)")


def test_the_dashboard_draws_the_alarm_only_in_a_run_where_it_fired():
    import matplotlib.pyplot as plt

    from bugfix_rl.present.dashboard import dashboard_figure

    def policy_labels(alarms):
        rows = [{"step": s, "reward": 0.0, "entropy": 0.0, "zero_adv_frac": 1.0, "collapse_alarm": a}
                for s, a in enumerate(alarms)]
        fig = dashboard_figure(rows)
        panel = next(ax for ax in fig.axes if ax.get_title() == "policy")
        labels = [line.get_label() for line in panel.get_lines()]
        plt.close(fig)
        return labels

    assert "collapse_alarm" not in policy_labels([0.0, 0.0, 0.0, 0.0])
    assert "collapse_alarm" in policy_labels([0.0, 0.0, 0.0, 1.0])
