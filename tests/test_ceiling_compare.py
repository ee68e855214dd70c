"""scripts/ceiling_compare.py on hand-made shapes_ceiling.py files: which step each arm is read at."""

from __future__ import annotations

from collections import Counter
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
    """Six templates of unequal size (two whose names hold '-' and share what comes before it); arm a gains
    on the first two only. The line
    over templates is arm_difference on each template's mean of its tasks, by hand: its mean weighs the
    templates alike (not the tasks), and it is wider than the line over tasks."""
    import torch

    from bugfix_rl.evaluate.intervals import arm_difference

    sizes = {"minmax/two-caps": 3, "minmax/two-lines": 2, "zero/quotients": 2, "zero/chain": 3, "init/count": 4, "init/loop": 2}
    names = [f"{template}-{i}{i}" for template, size in sizes.items() for i in range(size)]
    a_counts = [[4, 4, 4, 3, 4, 1, 0, 1, 0, 1, 2, 2, 1, 3, 2, 2],
                [4, 3, 4, 4, 3, 0, 1, 0, 1, 0, 2, 1, 2, 2, 1, 2],
                [3, 4, 4, 4, 4, 0, 0, 1, 1, 0, 1, 2, 2, 2, 2, 1]]
    b_counts = [[0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 2, 2, 2, 2, 2, 2],
                [1, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 2, 2, 1, 2, 1],
                [0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 2, 1, 2, 2, 1, 2]]
    heldout = [1, 2]
    a = [_run_file(tmp_path / f"a{s}.json", s, {60: c}, heldout, names) for s, c in enumerate(a_counts)]
    b = [_run_file(tmp_path / f"b{s}.json", s, {60: c}, heldout, names) for s, c in enumerate(b_counts)]
    lines = _compare(monkeypatch, capsys, "--a", *a, "--b", *b)

    def template_means(counts):  # [seeds, 6]: each template's tasks' mean rate, in order of first appearance
        starts = [0, 3, 5, 7, 10, 14, 16]
        return torch.tensor([[sum(row[starts[t]:starts[t + 1]]) / 4 / (starts[t + 1] - starts[t]) for t in range(6)]
                             for row in counts], dtype=torch.float64)

    by_hand = arm_difference(template_means(a_counts), template_means(b_counts))
    over = [line for line in lines if "over templates" in line]
    assert over == [f"shapes_val: a - b {float(by_hand.diff):+.3f} [{float(by_hand.lo):+.3f}, {float(by_hand.hi):+.3f}]"
                    f" over templates (seed-aware: 3 + 3 seeds, 6 templates, each its tasks' mean)"]
    tasks_line = next(line for line in lines if line.startswith("shapes_val: a - b") and "over" not in line)
    over_tasks = float(tasks_line.split("a - b ")[1].split(" ")[0])
    assert abs(over_tasks - float(by_hand.diff)) > 0.01  # the tasks' mean weighs the bigger templates more
    lo, hi = (float(x) for x in tasks_line.split("[")[1].split("]")[0].split(", "))
    assert -1 < float(by_hand.lo) and float(by_hand.hi) < 1  # not clamped: the widths below are the intervals'
    assert hi - lo < float(by_hand.hi - by_hand.lo)  # the gain sits in one template: over tasks is narrower
    assert not any(line.startswith("heldout") and "over templates" in line for line in lines)


def test_arms_that_read_other_tasks_are_refused(tmp_path, monkeypatch, capsys):
    a = [_run_file(tmp_path / f"a{s}.json", s, {60: [1, 2]}, [1, 2], ["minmax/x-aa", "zero/y-bb"]) for s in (0, 1)]
    b = [_run_file(tmp_path / f"b{s}.json", s, {60: [1, 2]}, [1, 2], ["minmax/x-aa", "zero/y-cc"]) for s in (0, 1)]
    with pytest.raises(SystemExit, match="arm a and arm b read different tasks"):
        _compare(monkeypatch, capsys, "--a", *a, "--b", *b)


def _one_run_read_at_60_and_90(tmp_path):
    """Three seeds' files, each one run read at steps 60 and 90 on two templates of two tasks (4 episodes
    each), and their [3 seeds, 4 tasks] pass rates by step."""
    import torch

    names = ["minmax/two-caps-aa", "minmax/two-caps-bb", "zero/chain-aa", "zero/chain-bb"]
    at_60 = [[1, 2, 0, 0], [3, 4, 1, 0], [0, 1, 0, 1]]  # seeds far apart: a shared effect the pairing cancels
    at_90 = [[2, 2, 1, 1], [4, 4, 1, 2], [1, 2, 0, 2]]
    runs = [_run_file(tmp_path / f"r{s}.json", s, {60: at_60[s], 90: at_90[s]}, [1, 1], names) for s in range(3)]
    rates = {step: torch.tensor(counts, dtype=torch.float64) / 4 for step, counts in ((60, at_60), (90, at_90))}
    return runs, rates


def test_paired_reads_one_run_at_two_steps_and_refuses_other_seeds(tmp_path, monkeypatch, capsys):
    """Three seeds read at steps 60 and 90 over two templates of two tasks: --paired is
    paired_arm_difference on each seed's own two readings, by hand; files of other seeds are refused."""
    from bugfix_rl.evaluate.intervals import paired_arm_difference

    runs, rates = _one_run_read_at_60_and_90(tmp_path)
    lines = _compare(monkeypatch, capsys, "--a", *runs, "--b", *runs, "--a-step", "90", "--b-step", "60", "--paired")
    by_hand = paired_arm_difference(rates[90], rates[60])
    tasks_line = next(line for line in lines if "a - b" in line and "over" not in line)
    assert tasks_line == (f"shapes_val (a at step 90, b at step 60): a - b {float(by_hand.diff):+.3f} "
                          f"[{float(by_hand.lo):+.3f}, {float(by_hand.hi):+.3f}] (paired by seed: 3 seeds, 4 tasks)")
    over = paired_arm_difference(*(rates[s].reshape(3, 2, 2).mean(-1) for s in (90, 60)))
    assert any(line.endswith(f"[{float(over.lo):+.3f}, {float(over.hi):+.3f}] over templates "
                             "(paired by seed: 3 seeds, 2 templates, each its tasks' mean)") for line in lines)
    unpaired = _compare(monkeypatch, capsys, "--a", *runs, "--b", *runs, "--a-step", "90", "--b-step", "60")
    def width(line):
        lo, hi = line.split("[")[1].split("]")[0].split(", ")
        return float(hi) - float(lo)

    assert width(tasks_line) < width(next(line for line in unpaired if "a - b" in line and "over" not in line))
    with pytest.raises(SystemExit, match=r"--paired needs the same seeds in a and b, in order; got \[0, 1, 2\] and \[2, 1, 0\]"):
        _compare(monkeypatch, capsys, "--a", *runs, "--b", *reversed(runs), "--paired")


def test_alpha_sets_every_intervals_level_and_names_it(tmp_path, monkeypatch, capsys):
    """--alpha 0.0294 (Pocock's level for two looks) gives paired_arm_difference's interval at that level,
    wider than the 95% one, and each interval line names it; a level outside (0, 1) is one line."""
    from bugfix_rl.evaluate.intervals import paired_arm_difference

    runs, rates = _one_run_read_at_60_and_90(tmp_path)
    flags = ["--a", *runs, "--b", *runs, "--a-step", "90", "--b-step", "60", "--paired"]
    lines = _compare(monkeypatch, capsys, *flags, "--alpha", "0.0294")
    by_hand = paired_arm_difference(rates[90], rates[60], 0.0294)
    at_95 = paired_arm_difference(rates[90], rates[60])
    assert float(by_hand.hi - by_hand.lo) > float(at_95.hi - at_95.lo)
    assert (f"a - b {float(by_hand.diff):+.3f} [{float(by_hand.lo):+.3f}, {float(by_hand.hi):+.3f}] "
            "(paired by seed: 3 seeds, 4 tasks, 97.06% interval)") in "\n".join(lines)
    over = paired_arm_difference(*(rates[s].reshape(3, 2, 2).mean(-1) for s in (90, 60)), 0.0294)
    assert any(line.endswith(f"[{float(over.lo):+.3f}, {float(over.hi):+.3f}] over templates (paired by seed: "
                             "3 seeds, 2 templates, each its tasks' mean, 97.06% interval)") for line in lines)
    with pytest.raises(SystemExit, match=r"--alpha must lie between 0 and 1, got 5.0"):
        _compare(monkeypatch, capsys, *flags, "--alpha", "5")


def test_each_side_can_read_another_arm_of_the_same_files(tmp_path, monkeypatch, capsys):
    """shapes_ceiling.py --average writes the averaged policy as arm training_average beside training: --a-arm
    and --b-arm read one from each side of the same files, paired seed by seed."""
    files = []
    for seed, (weights, average) in enumerate((([2, 2], [4, 2]), ([1, 3], [3, 3]))):
        path = tmp_path / f"avg{seed}.json"
        _run_file(path, seed, {60: weights}, [2, 2])
        run = json.loads(path.read_text())
        run["arms"]["training_average"] = {"shapes": {"60": {"per_task": average, "n": 4}},
                                           "heldout": {"per_task": [4, 2], "n": 4}}
        path.write_text(json.dumps(run))
        files.append(str(path))
    lines = _compare(monkeypatch, capsys, "--a", *files, "--b", *files, "--a-arm", "training_average",
                     "--b-arm", "training", "--paired")
    # the average 0.75 in both seeds against the weights' 0.5 and 0.5: +0.25; held-out 0.75 against 0.5
    assert "mean 0.750" in lines[0] and "mean 0.500" in lines[1]
    assert lines[2].startswith("shapes_val: a - b +0.250") and "paired by seed: 2 seeds" in lines[2]
    assert any(line.startswith("heldout: a - b +0.250") for line in lines)
    with pytest.raises(SystemExit, match="not a shapes_ceiling.py --out file with arm 'training_mean'"):
        _compare(monkeypatch, capsys, "--a", *files, "--b", *files, "--a-arm", "training_mean")


def test_behaviour_readings_count_refusals_and_the_episodes_that_passed_after_one():
    """shapes_ceiling.py --behaviour: per refused-call kind, [episodes with one, of those passed]."""
    from bugfix_rl.gym.tools.env import ToolsEpisodeInfo
    from bugfix_rl.types import Trajectory

    def episode(actions: list[str], passed: float) -> Trajectory:  # passed: the hidden tests' verdict
        info = ToolsEpisodeInfo(task="t", fix_op="fix_comparison", actions=actions, hidden_pass=bool(passed),
                                failed=Counter(a.split(":")[1] for a in actions if a.startswith("Edit:")))  # as the env counts them
        return Trajectory(ids=[1, 2, 3], policy_mask=[False, True, True], sampler_logp=[0.0, -1.0, -1.0],
                          reward=passed * 0.9, group=0, info=info)  # a reward below 1 (a step penalty) still passes

    episodes = [episode(["Read", "Edit:syntax_error", "Edit:syntax_error", "Edit"], 1.0),
                episode(["Read", "Edit:syntax_error", "malformed:unterminated"], 0.0),
                episode(["Edit:not_read", "Read", "Edit"], 1.0), episode(["Read", "Edit"], 0.0)]
    reading = load_script("shapes_ceiling").with_behaviour({"pass_at_1": 0.5}, episodes)
    assert reading["after_refusal"] == {"not_read": [1, 1], "syntax_error": [2, 1]}
    assert reading["pass_at_1"] == 0.5 and reading["behaviour"]["reward"] == pytest.approx(0.45)
