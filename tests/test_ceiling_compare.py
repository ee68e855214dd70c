"""scripts/ceiling_compare.py on hand-made shapes_ceiling.py files: which step each arm is read at."""

from __future__ import annotations

import json
import sys

import pytest
from repo_scripts import load_script


def _run_file(path, seed: int, per_step: dict[int, list[int]], heldout: list[int], names: list[str] | None = None):
    """A shapes_ceiling.py --out file of one seed: the training arm's shapes_val counts (of 4) per step
    (with names: the tasks' names too, as the runs write them)."""
    named = {"tasks_names": names} if names else {}
    arm = {"shapes": {str(step): {"per_task": counts, "n": 4, **named} for step, counts in per_step.items()},
           "heldout": {"per_task": heldout, "n": 4}}
    path.write_text(json.dumps({"seed": seed, "steps": max(per_step), "split": "shapes_val",
                                "arms": {"training": arm}}))
    return str(path)


def _compare(monkeypatch, capsys, *args) -> list[str]:
    monkeypatch.setattr(sys, "argv", ["ceiling_compare.py", *args])
    load_script("ceiling_compare").main()
    return capsys.readouterr().out.splitlines()


def test_each_arm_is_read_at_its_own_step(tmp_path, monkeypatch, capsys):
    a = [_run_file(tmp_path / f"a{s}.json", s, {0: [0, 0], 30: [4, 2], 60: [2, 2]}, [1, 1]) for s in (0, 1)]
    b = [_run_file(tmp_path / f"b{s}.json", s, {0: [0, 0], 30: [0, 0], 60: [2, 0]}, [2, 2]) for s in (0, 1)]
    last = _compare(monkeypatch, capsys, "--a", *a, "--b", *b)
    # at the last step: a 0.5, b 0.25; held-out read too
    assert "mean 0.500" in last[0] and "mean 0.250" in last[1] and last[2].startswith("shapes_val: a - b +0.250")
    assert any(line.startswith("heldout: a - b -0.250") for line in last)
    stepped = _compare(monkeypatch, capsys, "--a", *a, "--b", *b, "--a-step", "30")
    # a at step 30 (0.75) against b at its last (0.25); no held-out line, which is read at the end only
    assert "a at step 30, b at step last" in stepped[0] and "mean 0.750" in stepped[0]
    assert stepped[2].startswith("shapes_val (a at step 30, b at step last): a - b +0.500")
    assert not any(line.startswith("heldout") for line in stepped)


def test_a_step_the_runs_did_not_read_is_one_line(tmp_path, monkeypatch, capsys):
    a = [_run_file(tmp_path / f"a{s}.json", s, {0: [0], 60: [1]}, [1]) for s in (0, 1)]
    with pytest.raises(SystemExit, match="read arm 'training' at steps 0, 60, not 45"):
        _compare(monkeypatch, capsys, "--a", *a, "--b", *a, "--a-step", "45")


def test_step_zero_is_named_and_b_steps_alone(tmp_path, monkeypatch, capsys):
    a = [_run_file(tmp_path / f"a{s}.json", s, {0: [1, 1], 60: [4, 4]}, [1]) for s in (0, 1)]
    b = [_run_file(tmp_path / f"b{s}.json", s, {0: [2, 2], 60: [3, 3]}, [1]) for s in (0, 1)]
    lines = _compare(monkeypatch, capsys, "--a", *a, "--b", *b, "--a-step", "0")
    assert "(a at step 0, b at step last)" in lines[0] and "mean 0.250" in lines[0] and "mean 0.750" in lines[1]
    lines = _compare(monkeypatch, capsys, "--a", *a, "--b", *b, "--b-step", "0")
    assert "(a at step last, b at step 0)" in lines[0] and "mean 1.000" in lines[0] and "mean 0.500" in lines[1]


def test_the_interval_over_templates_averages_each_templates_tasks(tmp_path, monkeypatch, capsys):
    """Two templates of two tasks each; arm a gains on the first template only. The line over templates
    is arm_difference on each template's mean, by hand; it is wider than the one over tasks."""
    import torch

    from bugfix_rl.evaluate.intervals import arm_difference

    names = ["minmax/two_caps-aa", "minmax/two_caps-bb", "zero/quotients-cc", "zero/quotients-dd"]
    a_counts, b_counts = [[4, 4, 0, 0], [4, 3, 1, 0]], [[1, 0, 0, 1], [0, 1, 1, 0]]
    a = [_run_file(tmp_path / f"a{s}.json", s, {60: c}, [1, 2], names) for s, c in enumerate(a_counts)]
    b = [_run_file(tmp_path / f"b{s}.json", s, {60: c}, [1, 2], names) for s, c in enumerate(b_counts)]
    lines = _compare(monkeypatch, capsys, "--a", *a, "--b", *b)
    # each template's mean of its two tasks' rates, per seed: a (1, 0), (0.875, 0.125); b (0.125, 0.125) twice
    by_hand = arm_difference(torch.tensor([[1.0, 0.0], [0.875, 0.125]], dtype=torch.float64),
                             torch.tensor([[0.125, 0.125], [0.125, 0.125]], dtype=torch.float64))
    over = [line for line in lines if "over templates" in line]
    assert over == [f"shapes_val: a - b {float(by_hand.diff):+.3f} [{float(by_hand.lo):+.3f}, {float(by_hand.hi):+.3f}]"
                    f" over templates (seed-aware: 2 + 2 seeds, 2 templates, each its tasks' mean)"]
    assert abs(float(by_hand.diff) - 0.375) < 1e-12  # 0.5 - 0.125
    tasks_line = next(line for line in lines if line.startswith("shapes_val: a - b") and "over" not in line)
    lo, hi = (float(x) for x in tasks_line.split("[")[1].split("]")[0].split(", "))
    assert hi - lo < float(by_hand.hi - by_hand.lo)  # the gain sits in one template: over tasks is narrower
    assert not any("over templates" in line for line in lines if line.startswith("heldout"))  # one task each
