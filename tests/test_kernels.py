"""kernels.py: which variables each BUGFIX_RL_KERNELS mode pins, and the MKL branch it reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from bugfix_rl import kernels
from bugfix_rl.kernels import MODE_ENV, PINNED_NAMES, PORTABLE_ENV, env_for_mode, mkl_branch, pinnable


def fake_cpu(monkeypatch, vendor: str, family: str = "25", model: str = "17"):
    fields = {"vendor_id": vendor, "cpu family": family, "model": model}
    monkeypatch.setattr(kernels, "_cpuinfo", fields.get)


@pytest.mark.parametrize("requested", ["AVX2", "AVX512,STRICT", "BRANCH=AVX2"])
def test_a_named_branch_runs_as_mkls_auto_branch_on_another_vendors_cpu_unless_its_check_is_answered(
        monkeypatch, requested):
    monkeypatch.setenv("MKL_CBWR", requested)
    monkeypatch.setattr(kernels, "mkl_vendor_check", "")
    fake_cpu(monkeypatch, "GenuineIntel", "6", "106")
    assert mkl_branch() == requested
    fake_cpu(monkeypatch, "AuthenticAMD")
    assert mkl_branch() == "AUTO(AuthenticAMD 25/17)"
    fake_cpu(monkeypatch, "AuthenticAMD", "23", "49")  # another AMD family: another key
    assert mkl_branch() == "AUTO(AuthenticAMD 23/49)"
    monkeypatch.setattr(kernels, "mkl_vendor_check", "not answered: no C compiler (cc, gcc or clang) on the PATH")
    assert mkl_branch() == "AUTO(AuthenticAMD 23/49)"
    for answered in ("answered", "answered (preloaded)"):  # MKL runs the branch: Intel's bytes
        monkeypatch.setattr(kernels, "mkl_vendor_check", answered)
        assert mkl_branch() == requested


def test_auto_carries_the_cpu_and_compatible_its_vendor(monkeypatch):
    """AUTO's code follows the CPU (native mode leaves MKL_CBWR unset: AUTO); COMPATIBLE is meant to be
    one vendor-independent branch, but carries the vendor until tests/test_golden.py has seen Intel's."""
    monkeypatch.setattr(kernels, "mkl_vendor_check", "")
    fake_cpu(monkeypatch, "AuthenticAMD")
    for requested, expected in [("COMPATIBLE", "COMPATIBLE(AuthenticAMD)"),
                                ("compatible,STRICT", "compatible,STRICT(AuthenticAMD)"),
                                ("AUTO", "AUTO(AuthenticAMD 25/17)")]:
        monkeypatch.setenv("MKL_CBWR", requested)
        assert mkl_branch() == expected
    monkeypatch.delenv("MKL_CBWR")
    assert mkl_branch() == "AUTO(AuthenticAMD 25/17)"
    fake_cpu(monkeypatch, "GenuineIntel", "6", "106")
    assert mkl_branch() == "AUTO(GenuineIntel 6/106)"
    fake_cpu(monkeypatch, "AuthenticAMD")
    monkeypatch.setattr(kernels, "mkl_vendor_check", "answered (preloaded)")  # MKL's AUTO differs then
    assert mkl_branch() == "AUTO(AuthenticAMD 25/17, answered)"


def test_without_cpuinfo_the_branch_is_reported_as_set(monkeypatch):
    monkeypatch.setattr(kernels, "_cpuinfo", lambda field: None)
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    assert mkl_branch() == "AVX2"


def test_without_a_c_compiler_mkls_check_keeps_its_answer_and_says_why(monkeypatch):
    import shutil

    monkeypatch.setattr(kernels, "mkl_vendor_check", "")
    monkeypatch.setattr(kernels, "cpu_flags", lambda: set(kernels.INTEL_CHECK_FLAGS))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    kernels._answer_mkls_vendor_check()
    assert kernels.mkl_vendor_check == "not answered: no C compiler (cc, gcc or clang) on the PATH"
    monkeypatch.setattr(kernels, "cpu_flags", lambda: {"avx2", "fma"})
    kernels._answer_mkls_vendor_check()
    assert kernels.mkl_vendor_check == "not answered: the CPU lacks bmi1, bmi2, f16c, movbe"


@pytest.mark.skipif(not pinnable(), reason="the pinned kernels are those of x86-64 CPUs with AVX2")
def test_portable_mkl_runs_the_avx2_branch_on_this_cpu_whatever_its_vendor():
    """MKL_VERBOSE names the branch each product ran on: CNR:AVX2 on an Intel CPU, and on another
    vendor's once pin_kernels has answered MKL's vendor check (else CNR:AUTO, and the run says why)."""
    code = ("import json, bugfix_rl, torch; from bugfix_rl import kernels; torch.ones(40, 64) @ torch.ones(64, 8); "
            "print(json.dumps([kernels.cpu_vendor(), kernels.mkl_vendor_check, kernels.kernel_signature()]))")
    env = {**env_for_mode("portable"), "MKL_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    vendor, check, signature = json.loads(out.stdout.strip().splitlines()[-1])
    if vendor != "GenuineIntel" and not check.startswith("answered"):
        pytest.skip(f"MKL's vendor check is {check} here")
    assert "CNR:AVX2" in out.stdout + out.stderr
    assert "mkl_cbwr=AVX2" in signature and (check.startswith("answered") if vendor != "GenuineIntel" else check == "")


def test_the_modes_pin_the_same_names_and_compatible_moves_mkl_only():
    assert MODE_ENV["portable"] == PORTABLE_ENV and MODE_ENV["native"] == {}
    assert set(MODE_ENV["compatible"]) == set(PORTABLE_ENV) == PINNED_NAMES
    assert {k for k in PORTABLE_ENV if MODE_ENV["compatible"][k] != PORTABLE_ENV[k]} == {"MKL_CBWR"}
    assert MODE_ENV["compatible"]["MKL_CBWR"] == "COMPATIBLE"


@pytest.mark.skipif(not pinnable(), reason="the pinned kernels are those of x86-64 CPUs with AVX2")
@pytest.mark.parametrize("mode", ["portable", "compatible", "native"])
def test_each_mode_sets_its_variables_before_torch_loads(mode):
    """A fresh interpreter with BUGFIX_RL_KERNELS=mode: the pinned variables and what torch then runs."""
    code = ("import json, os, bugfix_rl, torch; from bugfix_rl.kernels import kernel_signature, PORTABLE_ENV; "
            "print(json.dumps({'env': {k: os.environ.get(k) for k in PORTABLE_ENV}, "
            "'aten': torch.backends.cpu.get_cpu_capability(), 'signature': kernel_signature()}))")
    env = env_for_mode(mode)
    out = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True, timeout=120).stdout)
    assert out["env"] == {k: MODE_ENV[mode].get(k) for k in PORTABLE_ENV}
    if mode == "native":
        assert "mkl_cbwr=AUTO(" in out["signature"]
    else:
        assert out["aten"] == "AVX2" and "onednn=AVX2" in out["signature"]
        assert ("mkl_cbwr=COMPATIBLE" in out["signature"]) == (mode == "compatible")


@pytest.mark.skipif(not pinnable() or kernels.cpu_vendor() == "GenuineIntel",
                    reason="MKL's vendor check is answered on x86-64 CPUs that are not Intel's")
def test_a_child_that_loads_torch_first_still_gets_the_answer_through_ld_preload():
    """Spawned ranks and workers unpickle torch before bugfix_rl; the answer reaches them on LD_PRELOAD,
    which this process set when it answered MKL's check (conftest imports bugfix_rl first)."""
    if not kernels.mkl_vendor_check.startswith("answered"):  # answered here, or preloaded from pytest's parent
        pytest.skip(f"MKL's vendor check is {kernels.mkl_vendor_check!r} in this process")
    code = ("import torch, json, bugfix_rl; from bugfix_rl import kernels; torch.ones(40, 64) @ torch.ones(64, 8); "
            "print(json.dumps([kernels.mkl_vendor_check, kernels.kernel_signature()]))")
    env = {**os.environ, "MKL_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    check, signature = json.loads(out.stdout.strip().splitlines()[-1])
    assert check == "answered (preloaded)" and "mkl_cbwr=AVX2" in signature
    assert "CNR:AVX2" in out.stdout + out.stderr and "CNR:AUTO" not in out.stdout + out.stderr


def test_a_branch_other_than_avx2_is_not_answered_and_says_so(monkeypatch):
    monkeypatch.setattr(kernels, "mkl_vendor_check", "")
    monkeypatch.setattr(kernels, "_cpuinfo", {"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17"}.get)
    monkeypatch.setattr(kernels, "pinnable", lambda: True)
    monkeypatch.setattr(kernels, "_answer_mkls_vendor_check", lambda: pytest.fail("must not answer"))
    monkeypatch.setattr(kernels, "_preloaded_answer", lambda: False)
    monkeypatch.setenv("BUGFIX_RL_KERNELS", "portable")
    monkeypatch.setenv("MKL_CBWR", "AUTO")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch is loaded in this process: pin_kernels warns about that
        kernels.pin_kernels()
        assert kernels.mkl_vendor_check == "not answered: MKL_CBWR=AUTO (only AVX2 is answered)"
        monkeypatch.setattr(kernels, "mkl_vendor_check", "")
        monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # needs no answer
        kernels.pin_kernels()
        assert kernels.mkl_vendor_check == ""


def test_a_child_switching_modes_gets_no_pins_and_not_our_answer(monkeypatch):
    ours = "/tmp/bugfix_rl_mkl_abc123/intel_check.so"
    monkeypatch.setenv("LD_PRELOAD", f"{ours}:/opt/other.so")
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    native = env_for_mode("native")
    assert native["LD_PRELOAD"] == "/opt/other.so" and "MKL_CBWR" not in native
    assert native["BUGFIX_RL_KERNELS"] == "native"
    assert env_for_mode("portable")["LD_PRELOAD"] == f"{ours}:/opt/other.so"  # the same answer: no compile
    monkeypatch.setenv("LD_PRELOAD", ours)
    assert "LD_PRELOAD" not in env_for_mode("compatible")


@pytest.mark.skipif(not pinnable() or kernels.cpu_vendor() == "GenuineIntel",
                    reason="MKL's vendor check is answered on x86-64 CPUs that are not Intel's")
def test_a_native_child_that_inherits_the_answer_says_so_in_its_signature():
    """MKL obeys a preloaded answer in any mode, so a native child that inherits one records it: its
    AUTO branch is not the one a clean native process runs."""
    if not kernels.mkl_vendor_check.startswith("answered"):
        pytest.skip(f"MKL's vendor check is {kernels.mkl_vendor_check!r} in this process")
    code = "import json, bugfix_rl; from bugfix_rl import kernels; print(json.dumps([kernels.mkl_vendor_check, kernels.kernel_signature()]))"
    env = {**{k: v for k, v in os.environ.items() if k not in PINNED_NAMES}, "BUGFIX_RL_KERNELS": "native"}
    inherited = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                          check=True, timeout=120).stdout.strip().splitlines()[-1])
    clean = json.loads(subprocess.run([sys.executable, "-c", code], env=env_for_mode("native"), capture_output=True,
                                      text=True, check=True, timeout=120).stdout.strip().splitlines()[-1])
    assert inherited[0] == "answered (preloaded)" and inherited[1].endswith(", answered) onednn=auto")
    assert clean[0] == "" and "answered" not in clean[1]


FIRST_PARALLEL_SQRT = """
import bugfix_rl
import torch
from bugfix_rl.kernels import set_torch_threads
set_torch_threads(2)
x = torch.rand(15040, generator=torch.Generator().manual_seed(0)) * 1e-3
two = torch.sqrt(x)  # the process's first parallel MKL call
torch.set_num_threads(1)
print(int((two != torch.sqrt(x)).sum()))
"""


@pytest.mark.slow  # 24 fresh processes, one after another: about 50 s on 2 cores
@pytest.mark.skipif(not pinnable(), reason="the pinned kernels are those of x86-64 CPUs with AVX2")
def test_the_first_parallel_mkl_call_of_a_fresh_process_runs_the_pinned_branch_on_both_threads():
    """Without settle_mkl_branch, 1 fresh process in 6 to 10 on a quiet 2-core EPYC computed one thread's
    half of this sqrt with other bits (MKL reads MKL_CBWR at its first call, and two threads raced for
    it), and the suite's golden hashes failed now and then. The race needs both cores free, so the
    processes run one after another (side by side they never raced); each must match one thread."""
    differing = [int(subprocess.run([sys.executable, "-c", FIRST_PARALLEL_SQRT], capture_output=True, text=True,
                                    env=env_for_mode("portable"), timeout=120).stdout) for _ in range(24)]
    assert differing == [0] * 24
