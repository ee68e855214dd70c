"""Portable determinism (issue 13): a seeded smoke run, its RL base built from scratch, ends with weights
whose hash is committed here. With BUGFIX_RL_KERNELS=portable (the default) torch's ATen, MKL and
oneDNN kernels are pinned to AVX2 (kernels.py), so the hash is the same on any x86-64 CPU with AVX2
or AVX-512, Intel or AMD. Checked on: Intel Xeon @ 2.00GHz (AVX-512), 1 and 2 threads.

If a change to the code is meant to change the numbers (a new default, another sampler), the hash
changes with it: rerun this test, read the new hash from its message, and commit it with the change."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.kernels import PORTABLE_ENV, pinnable

GOLDEN = {1: "09b9ceeac1063dd0", 2: "09b9ceeac1063dd0"}  # threads -> sha256[:16] of the step-2 weights


def weights_digest(path) -> str:
    """sha256 (first 16 hex digits) over the model tensors of a checkpoint, in key order."""
    tensors, _ = load_checkpoint(path)
    digest = hashlib.sha256()
    for key in sorted(k for k in tensors if k.startswith("model.")):
        digest.update(key.encode())
        digest.update(tensors[key].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.skipif(not pinnable(), reason="the pinned kernels are those of x86-64 CPUs with AVX2")
@pytest.mark.parametrize("threads", sorted(GOLDEN))
def test_a_seeded_smoke_run_hashes_to_the_committed_value(tmp_path, threads):
    env = {**{k: v for k, v in os.environ.items() if k not in PORTABLE_ENV}, "BUGFIX_RL_KERNELS": "portable"}
    result = subprocess.run(
        [sys.executable, "-m", "bugfix_rl.cli", "train", "+exp=smoke", "seed=0", f"threads={threads}",
         "policy.base.episodes=32", "policy.base.steps=8", f"policy.cache_dir={tmp_path}/cache",
         "preflight=false", "eval.test=false", f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    digest = weights_digest(tmp_path / "run" / "checkpoints" / "step_002.safetensors")
    assert digest == GOLDEN[threads], f"step-2 weights hash to {digest} with {threads} thread(s)"
