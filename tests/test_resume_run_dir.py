"""`train resume=<run dir>` continues from that run's last checkpoint, as a TRL or verl user expects
(issue 38): it ends where `resume=<that checkpoint file>` ends, and says which checkpoint it took."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from in_process import CliResult, cli_result
from safetensors.torch import load_file

from bugfix_rl.errors import UserError
from bugfix_rl.commands.inputs import resume_checkpoint

SMOKE = ("+exp=smoke", "eval.ckpt_every=1", "threads=1", "preflight=false")


def _train(cwd: Path, *args: str) -> CliResult:
    """`bugfix-rl train <SMOKE> <args>` run from `cwd` in this process (tests/in_process.py)."""
    result = cli_result("train", *SMOKE, *args, cwd=cwd)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_resume_from_a_run_dir_equals_resume_from_its_last_checkpoint(tmp_path):
    origin = tmp_path / "origin"
    _train(tmp_path, "steps=2", f"hydra.run.dir={origin}")
    last = origin / "checkpoints" / "step_002.safetensors"

    from_dir = _train(tmp_path, "steps=3", f"resume={origin}")  # the default run dir, under tmp_path/outputs
    assert f"resume={origin} is a run dir: resuming from its last checkpoint {last}" in from_dir.stderr
    (dir_run,) = (tmp_path / "outputs" / "smoke").glob("*_seed0_from_origin_step_002")  # named after the file
    from_file = tmp_path / "from_file"
    _train(tmp_path, "steps=3", f"resume={last}", f"hydra.run.dir={from_file}")

    by_dir = load_file(dir_run / "checkpoints" / "step_003.safetensors")
    by_file = load_file(from_file / "checkpoints" / "step_003.safetensors")
    assert by_dir.keys() == by_file.keys()
    assert all(torch.equal(by_dir[name], by_file[name]) for name in by_file)
    trained = load_file(last)
    assert any(not torch.equal(by_file[name], trained[name]) for name in trained if name.startswith("model."))
    # the checkpoint's run took a constant rate: a schedule whose first 2 steps differ cannot continue it
    refused = cli_result("train", *SMOKE, "steps=3", f"resume={last}", "algo.lr_schedule=cosine", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "took other learning rates in its first 2 steps than this run's settings give them: resume with"
        " algo.lr_schedule=constant algo.lr_warmup_steps=0 algo.lr_decay_steps=0 steps=2, or start a new run"
        " from its weights with policy.init=<the checkpoint>")


def test_a_resume_must_agree_on_the_rates_of_the_steps_taken_only():
    """Resuming continues a run only if every step it took had the rate this run's settings give that
    step; the steps to come may differ (a longer run, a decay added at the end). Checkpoints from before
    the schedule (no keys) read as constant."""
    from bugfix_rl.commands.inputs import schedule_mismatch
    from bugfix_rl.config import TrainConfig

    cfg = TrainConfig()
    cfg.steps, cfg.algo.lr_schedule, cfg.algo.lr_decay_steps = 120, "cosine", 30  # stable until step 90
    saved = {"steps": 90, "algo": {"lr_schedule": "cosine", "lr_warmup_steps": 0, "lr_decay_steps": 30}}
    assert schedule_mismatch(saved, cfg, 60) is None  # 90 -> 120 steps from a stable-phase checkpoint
    assert schedule_mismatch({"steps": 60, "algo": {"lr": 1e-3}}, cfg, 60) is None  # constant, then a decay added
    refused = schedule_mismatch(saved, cfg, 75)  # step 60-74 decayed in the 90-step run, not in this one
    assert refused.startswith("took other learning rates in its first 75 steps") and "steps=90" in refused
    assert schedule_mismatch(saved, cfg, 0) is None  # a checkpoint before any step continues anything
    unreadable = schedule_mismatch({"steps": 90, "algo": {"lr_schedule": "step"}}, cfg, 5)
    assert unreadable.startswith("has a learning-rate schedule this version cannot read (lr_schedule='step'")


def test_a_run_dirs_last_checkpoint_is_its_highest_step(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for name in ("step_999.safetensors", "step_1000.safetensors", "step_best.safetensors"):
        (tmp_path / "checkpoints" / name).touch()
    assert resume_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoints" / "step_1000.safetensors")
    assert resume_checkpoint("a/file.safetensors") == "a/file.safetensors"  # a file (or missing path) is itself
    with pytest.raises(UserError, match="without checkpoints"):
        resume_checkpoint(str(tmp_path / "checkpoints"))
