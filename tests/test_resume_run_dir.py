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
    # the checkpoint's run took a constant rate: a schedule now would give the steps left other rates
    refused = cli_result("train", *SMOKE, "steps=3", f"resume={last}", "algo.lr_schedule=cosine", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        "was trained with algo.lr_schedule=constant algo.lr_warmup_steps=0 algo.lr_decay_steps=0, this run has"
        " algo.lr_schedule=cosine algo.lr_warmup_steps=0 algo.lr_decay_steps=0: resume with"
        " algo.lr_schedule=constant algo.lr_warmup_steps=0 algo.lr_decay_steps=0")


def test_a_decaying_schedule_ties_the_resumed_runs_length():
    """A constant rate may be resumed into a longer run (steps=3 from a 2-step run, above); a decaying one
    may not: its rates depend on the run's length. Checkpoints from before the schedule (no keys) read as
    constant."""
    from bugfix_rl.commands.inputs import schedule_mismatch
    from bugfix_rl.config import TrainConfig

    cfg = TrainConfig()
    cfg.steps, cfg.algo.lr_schedule, cfg.algo.lr_decay_steps = 90, "cosine", 30
    saved = {"steps": 90, "algo": {"lr_schedule": "cosine", "lr_warmup_steps": 0, "lr_decay_steps": 30}}
    assert schedule_mismatch(saved, cfg) is None
    assert schedule_mismatch({**saved, "steps": 60}, cfg) == (
        "decays its learning rate over steps=60, this run has steps=90 (other rates for the steps left):"
        " resume with steps=60")
    constant = TrainConfig()
    constant.steps = 120
    assert schedule_mismatch({"steps": 60, "algo": {"lr": 1e-3}}, constant) is None  # before the schedule
    assert "was trained with algo.lr_schedule=constant" in schedule_mismatch({"steps": 90, "algo": {}}, cfg)


def test_a_run_dirs_last_checkpoint_is_its_highest_step(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for name in ("step_999.safetensors", "step_1000.safetensors", "step_best.safetensors"):
        (tmp_path / "checkpoints" / name).touch()
    assert resume_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoints" / "step_1000.safetensors")
    assert resume_checkpoint("a/file.safetensors") == "a/file.safetensors"  # a file (or missing path) is itself
    with pytest.raises(UserError, match="without checkpoints"):
        resume_checkpoint(str(tmp_path / "checkpoints"))
