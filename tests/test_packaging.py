"""`pip install .` and an installed wheel carry the configs and the shipped RL bases: a wheel built from a
copy of the repo, installed into a directory of its own, trains `+exp=smoke` from a directory outside the
source tree with an empty cache, loading the shipped base instead of building one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


def test_a_wheel_installs_and_trains_from_outside_the_source_tree(tmp_path):
    source = tmp_path / "source"  # a copy: building in the repo would leave build/ and egg-info behind
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("src", "conf"):
        shutil.copytree(ROOT / name, source / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    built = _run([sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation", "-q",
                  "-w", tmp_path / "dist"], timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("bugfix_rl-*.whl")
    site = tmp_path / "site"
    installed = _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheel], timeout=300)
    assert installed.returncode == 0, installed.stderr
    assert len(list((site / "bugfix_rl" / "conf").rglob("*.yaml"))) == len(list((ROOT / "conf").rglob("*.yaml")))
    shipped = sorted(path.name for path in (ROOT / "src" / "bugfix_rl" / "bases").glob("*.safetensors"))
    assert shipped and sorted(path.name for path in (site / "bugfix_rl" / "bases").glob("*.safetensors")) == shipped

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = tmp_path / "cache"  # empty: the run must find its base among the wheel's shipped ones
    env = {**os.environ, "PYTHONPATH": str(site), "BUGFIX_RL_CACHE": str(cache)}  # ahead of the editable src/
    where = _run([sys.executable, "-c", "import bugfix_rl.cli as c; print(c.CONF_DIR)"], cwd=elsewhere, env=env)
    assert where.stdout.strip() == str(site / "bugfix_rl" / "conf"), where.stderr
    trained = _run([site / "bin" / "bugfix-rl", "train", "+exp=smoke", "steps=1", "threads=1", "eval.n_val=2",
                    "eval.n_test=2", "hydra.run.dir=run"], cwd=elsewhere, env=env, timeout=600)
    assert trained.returncode == 0, trained.stderr
    assert "building the" not in trained.stderr and not list(cache.glob("*.safetensors"))
    assert trained.stdout.strip().splitlines()[-1] == f"run dir: {elsewhere / 'run'}"
    assert (elsewhere / "run" / "status.json").is_file()
