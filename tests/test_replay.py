"""Async and worker runs replay (issue 36, rollout/replay.py): the batches sampled ahead of the learner
are part of a checkpoint, so a run resumed from it ends at the uninterrupted run's bytes, as a rerun
does. Before, the resume drew those batches again with its own weights (121 of 161 tensors differed)."""

from __future__ import annotations

import json
from collections import Counter

import torch

from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.gym.tools.env import ToolsEpisodeInfo
from bugfix_rl.rollout.replay import (info_from_record, info_record, replay_caveats, schedule_from_record,
                                      schedule_record, trajectory_from_record, trajectory_record)
from bugfix_rl.run.training import run_training
from bugfix_rl.types import Trajectory
from tests.conftest import small_config


def test_a_tools_episode_record_round_trips_with_its_counters_and_flags():
    info = ToolsEpisodeInfo(task="t", fix_op="flip", actions=["Read", "Edit:not_found"], calls=Counter(Read=2, Edit=1),
                            failed=Counter(not_found=1), grade_flags=frozenset({"timeout", "import_error"}),
                            turn_malformed=[0, 1], hidden_frac=1 / 3)
    t = Trajectory([1, 5, 7], [False, True, True], [0.0, -0.123456789, -2.5e-8], 0.25, 3, info, 7, ("zz",))
    back = trajectory_from_record(trajectory_record(t))
    assert back == t  # dataclass equality: every field, the info's too
    assert type(back.info.calls) is Counter and type(back.info.grade_flags) is frozenset
    assert type(back.oov_words) is tuple
    assert info_from_record(info_record(info)) == info


def test_a_schedule_keeps_its_steps_and_order():
    info = ToolsEpisodeInfo(task="t", fix_op="flip")
    batch = [Trajectory([1, 2], [False, True], [0.0, -0.5], 1.0, g, info, 4) for g in range(3)]
    record = schedule_record({6: batch[2:], 5: batch[:2]})
    assert list(record) == ["5", "6"]
    assert schedule_from_record(record) == {5: batch[:2], 6: batch[2:]}


def test_the_paths_that_may_not_replay_say_so_in_one_line_each():
    rows = [{"step": 0, "over_budget": 0.0}, {"step": 1, "over_budget": 0.25}, {"step": 2}, {"step": 3, "over_budget": 1}]
    assert replay_caveats(False, rows[:1] + rows[2:3]) == []
    assert replay_caveats(False, rows) == ["replay not guaranteed: at steps [1, 3] a sandbox run was cut by "
                                           "env.step_budget_s (wall clock), which a rerun need not repeat"]
    cuda = replay_caveats(True, [])
    assert len(cuda) == 1 and cuda[0].startswith("replay not guaranteed: the policy ran on CUDA")


def _tensors(path) -> dict:
    return load_checkpoint(path)[0]


def test_an_async_worker_run_resumed_from_any_checkpoint_ends_at_the_same_bytes(tmp_path):
    """The must-show's local-engine case: rollout.workers=2 (in-process shards), max_staleness=1,
    tis_cap=2, 4 steps, a checkpoint every 2. The run, its rerun and its resume from step 2 end with
    identical tensors (weights, Adam's state, the generator) and identical dashboard rows."""
    overrides = {"rollout.workers": 2, "rollout.engine": "local", "rollout.max_staleness": 1, "algo.tis_cap": 2.0,
                 "algo.prompts_per_step": 2, "algo.group_size": 4, "steps": 4, "eval.ckpt_every": 2,
                 "eval.n_val": 1}
    run_training(small_config(**overrides), tmp_path / "full")
    step2 = tmp_path / "full" / "checkpoints" / "step_002.safetensors"
    schedule = load_checkpoint(step2)[1]["rollout_schedule"]
    assert list(schedule) == ["2"]  # step 2's batch, sampled during step 1 ...
    assert {t["policy_version"] for t in schedule["2"]} == {1}  # ... by the weights of version 1
    run_training(small_config(**overrides, resume=str(step2)), tmp_path / "resumed")
    run_training(small_config(**overrides), tmp_path / "rerun")
    full = _tensors(tmp_path / "full" / "checkpoints" / "step_004.safetensors")
    for other in ("resumed", "rerun"):
        tensors = _tensors(tmp_path / other / "checkpoints" / "step_004.safetensors")
        assert set(tensors) == set(full)
        differ = [key for key in full if not torch.equal(full[key], tensors[key])]
        assert differ == [], f"{other}: {len(differ)} of {len(full)} tensors differ"

    def rows(run: str) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
                for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    assert rows("resumed") == rows("full") == rows("rerun")
    assert [r["staleness_max"] for r in rows("full")] == [0.0, 1.0, 1.0, 1.0]
    assert json.loads((tmp_path / "resumed" / "eval.json").read_text())["replay"] == {"caveats": []}
