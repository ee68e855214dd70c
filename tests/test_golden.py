"""Portable determinism (issue 13): a seeded smoke run, its RL base built from scratch, ends with weights
whose hash is committed here, per kernel mode (kernels.py) and the CPUs it was recorded on.

- portable (the default; ATen, MKL and oneDNN pinned to AVX2): one hash for Intel CPUs with AVX2 or
  AVX-512 (recorded on an Intel Xeon @ 2.00GHz, AVX-512); MKL runs its AUTO branch on other vendors'
  CPUs, so each of those has its own (recorded: AMD EPYC, family 25 model 17, AVX-512).
- compatible (MKL's COMPATIBLE branch as well): meant to be one hash for every x86-64 CPU with AVX2;
  recorded on the AMD EPYC only so far (on an Intel CPU the case skips and prints what it computed).

A CPU with nothing recorded for a mode skips that case, and the message says what it computed, so a
reader with such a CPU can add it. If a change to the code is meant to change the numbers (a new
default, another sampler), every hash changes with it: rerun this test on the CPUs listed, read the
new hashes from its messages, and commit them with the change."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from bugfix_rl.checkpoint import load_checkpoint
from bugfix_rl.kernels import PINNED_NAMES, _cpuinfo, cpu_vendor, pinnable

INTEL = "GenuineIntel"
AMD_EPYC_25_17 = "AuthenticAMD 25/17"
# (mode, CPU) -> sha256[:16] of the step-2 weights, the same with 1 and 2 threads on each CPU recorded;
# CPU: the vendor where all its CPUs run the same MKL branch (Intel), else vendor family/model
GOLDEN = {
    ("portable", INTEL): "09b9ceeac1063dd0",  # Intel Xeon @ 2.00GHz (AVX-512)
    ("portable", AMD_EPYC_25_17): "f014da07946cb424",  # AMD EPYC (AVX-512)
    ("compatible", AMD_EPYC_25_17): "7f754e59185ce206",  # meant to be every CPU's: record Intel's beside it
}


def this_cpu() -> str:
    vendor = cpu_vendor()
    return vendor if vendor == INTEL else f"{vendor} {_cpuinfo('cpu family')}/{_cpuinfo('model')}"




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
    expected = GOLDEN.get((mode, this_cpu()))
    env = {**{k: v for k, v in os.environ.items() if k not in PINNED_NAMES}, "BUGFIX_RL_KERNELS": mode}
    result = subprocess.run(
        [sys.executable, "-m", "bugfix_rl.cli", "train", "+exp=smoke", "seed=0", f"threads={threads}",
         "policy.base.episodes=32", "policy.base.steps=8", f"policy.cache_dir={tmp_path}/cache",
         "preflight=false", "eval.test=false", f"hydra.run.dir={tmp_path}/run"],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    digest = weights_digest(tmp_path / "run" / "checkpoints" / "step_002.safetensors")
    if expected is None:
        recorded = ", ".join(f"{cpu}: {value}" for (m, cpu), value in GOLDEN.items() if m == mode)
        pytest.skip(f"no {mode} hash recorded for this CPU ({this_cpu()}); it computed {digest} with {threads} "
                    f"thread(s) (recorded: {recorded}): add it to GOLDEN")
    assert digest == expected, f"{mode} step-2 weights hash to {digest} on {this_cpu()} with {threads} thread(s)"
