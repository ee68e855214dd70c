"""Portable determinism (issue 13): a seeded smoke run, its RL base built from scratch, ends with weights
whose hash is committed here for the CPU kernels it ran on (kernels.kernel_signature, which the run
records in eval.json).

- portable (the default; ATen, MKL and oneDNN pinned to AVX2, and MKL's vendor check answered on a CPU
  that is not Intel's): one hash, recorded on an Intel Xeon @ 2.00GHz (AVX-512) and on an AMD EPYC
  (family 25, model 17, AVX-512), 1 and 2 threads, and met again on an Intel Xeon of family 6 model 207
  (2026-12-05). Without a C compiler the EPYC keeps MKL's own answer
  and its own hash (recorded too).
- compatible (MKL's COMPATIBLE branch as well): not one hash for all vendors: the AMD EPYC's, the same
  through both of MKL's dispatch paths (with and without the answer), and an Intel Xeon's (family 6
  model 207), another one, 1 and 2 threads (2026-12-05). Its signature names the vendor, so each vendor's
  CPU is checked against the hash recorded on one CPU of that vendor; another Intel model that computes
  other bytes would fail here, not skip (MKL means COMPATIBLE to agree across Intel CPUs; one is checked).

Kernels with nothing recorded skip, and the message says what they computed, so a reader with such a
CPU can add it. If a change to the code is meant to change the numbers (a new default, another
sampler), every hash changes with it: rerun this test, read the new hashes from its messages, and
commit them with the change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.kernels import env_for_mode, pinnable

# kernel_signature of the run -> sha256[:16] of the step-2 weights (the same with 1 and 2 threads)
GOLDEN = {
    "aten=AVX2 mkl_cbwr=AVX2 onednn=AVX2": "09b9ceeac1063dd0",  # portable: the Xeon, and the EPYC with the answer
    "aten=AVX2 mkl_cbwr=AUTO(AuthenticAMD 25/17) onednn=AVX2": "f014da07946cb424",  # the EPYC with MKL's own answer
    "aten=AVX2 mkl_cbwr=COMPATIBLE(AuthenticAMD) onednn=AVX2": "7f754e59185ce206",  # compatible, the EPYC (both paths)
    # compatible, an Intel Xeon (6/207), 1 and 2 threads: not the EPYC's
    "aten=AVX2 mkl_cbwr=COMPATIBLE(GenuineIntel) onednn=AVX2": "52a3b31b5fe9f30d",
}


def weights_digest(path) -> str:
    """sha256 (first 16 hex digits) over the model tensors of a checkpoint, in key order."""
    tensors, _ = load_checkpoint(path)
    digest = hashlib.sha256()
    for key in sorted(k for k in tensors if k.startswith("model.")):
        digest.update(key.encode())
        digest.update(tensors[key].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.skipif(not pinnable(), reason="the pinned kernels are those of x86-64 CPUs with AVX2")
@pytest.mark.parametrize("mode,threads", [("portable", 1), ("portable", 2), ("compatible", 1)])
def test_a_seeded_smoke_run_hashes_to_the_committed_value(tmp_path, mode, threads):
    env = env_for_mode(mode)
    result = subprocess.run(
        [sys.executable, "-m", "bugfix_rl.cli", "train", "+exp=smoke", "seed=0", f"threads={threads}",
         "policy.base.episodes=32", "policy.base.steps=8", f"policy.cache_dir={tmp_path}/cache",
         "preflight=false", "eval.test=false", f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    digest = weights_digest(tmp_path / "run" / "checkpoints" / "step_002.safetensors")
    versions = json.loads((tmp_path / "run" / "eval.json").read_text())["config"]["versions"]
    kernels = versions["kernels"]
    if kernels not in GOLDEN:
        pytest.skip(f"no hash recorded for the kernels {kernels!r} ({versions['cpu']}, MKL's vendor check: "
                    f"{versions['mkl_vendor_check']}); this run computed {digest} with {threads} thread(s): add it")
    assert digest == GOLDEN[kernels], (f"{mode} step-2 weights hash to {digest} on {versions['cpu']} ({kernels}) "
                                       f"with {threads} thread(s)")
