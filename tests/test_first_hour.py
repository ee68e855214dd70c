"""A new user's first hour (issue 14): a bad value stops at once and leaves no folder behind; a run
ends by saying where its results are; Ctrl-C stops cleanly and says how to resume."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bugfix_rl.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


BAD_VALUES = [
    (["steps=0"], "steps=0 must be > 0"),
    (["steps=-5"], "steps=-5 must be > 0"),
    (["seed=-1"], "seed=-1 must be >= 0"),
    (["algo.group_size=1"], "algo.group_size=1 must be >= 2"),
    (["seed=0,1"], "add -m"),
    (["seed=0,1", "steps=0", "-m"], "steps=0 must be > 0"),
]


@pytest.mark.parametrize("args,message", BAD_VALUES, ids=[" ".join(a) for a, _ in BAD_VALUES])
def test_bad_value_is_one_line_exit_2_and_leaves_no_folder(tmp_path, args, message):
    result = _cli("train", f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep", *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert message in lines[0]
    assert list(tmp_path.iterdir()) == []  # validated before Hydra creates a run (or sweep) dir


SMOKE = ("+exp=smoke", "threads=1", "eval.n_val=2", "eval.n_test=2")


def test_a_run_ends_with_its_score_and_run_dir(tmp_path):
    result = _cli("train", *SMOKE, "steps=1", f"hydra.run.dir={tmp_path}/run", timeout=600)
    assert result.returncode == 0, result.stderr
    *_, score, where = result.stdout.strip().splitlines()
    assert re.fullmatch(r"chosen checkpoint: step [01], test pass@1 [01]\.\d{3} \[[01]\.\d{3}, [01]\.\d{3}\]", score)
    assert where == f"run dir: {tmp_path}/run"
    assert json.loads((tmp_path / "run" / "status.json").read_text()) == {
        "status": "complete", "step": 1, "last_checkpoint": f"{tmp_path}/run/checkpoints/step_001.safetensors"}


def test_ctrl_c_names_the_checkpoint_and_its_resume_command_which_runs(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", *SMOKE, "steps=200", f"hydra.run.dir={run_dir}"]
    # a session of its own, signalled as a group: what Ctrl-C in a terminal does
    proc = subprocess.Popen([sys.executable, "-m", "bugfix_rl.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (run_dir / "checkpoints" / "step_001.safetensors").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "no step-1 checkpoint after 300 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert proc.returncode == 130 and len(lines) == 1 and "Traceback" not in stderr, stderr

    status = json.loads((run_dir / "status.json").read_text())
    checkpoint = Path(status["last_checkpoint"])
    assert status["status"] == "interrupted" and status["step"] >= 1 and checkpoint.is_file()
    assert f"last checkpoint {checkpoint};" in lines[0]
    command = shlex.split(lines[0].split("resume with: ")[1])
    assert command[:2] == ["bugfix-rl", "train"] and command[-1] == f"resume={checkpoint}"

    resumed_dir = tmp_path / "resumed"
    start = int(checkpoint.stem.removeprefix("step_"))
    overrides = [f"steps={start + 1}" if arg == "steps=200" else arg for arg in command[2:]]
    resumed = _cli("train", *overrides, f"hydra.run.dir={resumed_dir}", timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip().splitlines()[-1] == f"run dir: {resumed_dir}"
    assert json.loads((resumed_dir / "status.json").read_text())["status"] == "complete"
    assert len((resumed_dir / "metrics.jsonl").read_text().splitlines()) == start + 1
