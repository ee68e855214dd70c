"""A new user's first hour (issue 14): a bad value stops at once and leaves no folder behind; a run
ends by saying where its results are."""

from __future__ import annotations

import re
import subprocess
import sys

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
    result = _cli("train", *args, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep")
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
