"""Which CPU kernels torch runs, chosen before torch loads (so `bugfix_rl` is imported before `torch`).

torch picks its vectorised ATen kernels, MKL its BLAS code path and oneDNN its JIT kernels by the CPU
they find (AVX2, AVX-512, ...), and each path rounds differently: the same seed gives other weights,
another RL base and other README numbers on another CPU. `BUGFIX_RL_KERNELS` chooses:

- `portable` (default): all three pinned to AVX2 (`ATEN_CPU_CAPABILITY=avx2`, MKL's conditional
  numerical reproducibility `MKL_CBWR=AVX2`, `ONEDNN_MAX_CPU_ISA=AVX2`), so Intel x86-64 CPUs with
  AVX2 or AVX-512 run the same code paths and should compute the same bytes for the same seed and
  thread count (recorded on one Xeon model so far: tests/test_golden.py). MKL honours a named
  branch other than COMPATIBLE only on Intel CPUs: on an AMD EPYC (family 25, model 17) `MKL_VERBOSE`
  reports `CNR:AUTO` for `MKL_CBWR=AVX2`, and its matrix products round otherwise, so an AMD CPU
  computes bytes of its own (kernel_signature names the CPU then). Measured on a 2-core AVX-512
  Xeon: a GRPO step costs 1.14x and 1.23x the native one in two runs of `scripts/bench_kernels.py`.
- `compatible`: as portable, with MKL on its COMPATIBLE branch (`MKL_CBWR=COMPATIBLE`: SSE2 without
  the approximate rcpps/rsqrtps, the branch MKL runs alike on Intel and other CPUs), meant for the
  same bytes on Intel and AMD CPUs (its hash is recorded on the AMD EPYC, not yet compared on an Intel
  CPU: tests/test_golden.py); its matrix products cost more (a behaviour-cloning step of the RL base
  1.9-2.2x the portable one on the AMD EPYC: docs/PERFORMANCE.md).
- `native`: whatever the CPU offers; faster, and the same bytes only on the same CPU model.

A variable the user set already is left as it is. On a CPU that is not x86-64, or one without AVX2 and
FMA, nothing is pinned (kernel_signature says what runs, and the RL base's cache key holds it).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings

MODES = ("portable", "compatible", "native")
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# mode -> the variables it pins (native pins nothing)
MODE_ENV = {"portable": PORTABLE_ENV, "compatible": {**PORTABLE_ENV, "MKL_CBWR": "COMPATIBLE"}, "native": {}}
PINNED_NAMES = frozenset().union(*MODE_ENV.values())  # what a child process must not inherit to run another mode


def requested_mode() -> str:
    return os.environ.get("BUGFIX_RL_KERNELS", "portable")


def _cpuinfo(field: str) -> str | None:
    """The value of the first `field` line of /proc/cpuinfo (Linux), or None where there is none."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux: /proc/cpuinfo), empty when unknown."""
    return set((_cpuinfo("flags") or "").split())


def pinnable() -> bool:
    """Whether the portable kernels can run here: an x86-64 CPU with AVX2 and FMA."""
    return platform.machine().lower() in ("x86_64", "amd64") and {"avx2", "fma"} <= cpu_flags()


def pin_kernels() -> None:
    """Set the requested mode's MODE_ENV (where unset) on an x86-64 CPU with AVX2 and FMA (torch obeys ATEN_CPU_CAPABILITY without checking the CPU: on one without AVX2 the pin
    would crash, so such a CPU runs its native kernels). torch must not be loaded yet, or its ATen
    choice is already made: a warning says so, and kernel_signature reports what runs."""
    pins = MODE_ENV.get(requested_mode(), {})
    if not pins or not pinnable():
        return
    if "torch" in sys.modules:
        warnings.warn("torch was imported before bugfix_rl: its CPU kernels are not pinned (import bugfix_rl first)",
                      stacklevel=3)
    for name, value in pins.items():
        os.environ.setdefault(name, value)


def kernel_signature() -> str:
    """What this process runs, e.g. 'aten=AVX2 mkl_cbwr=AVX2 onednn=AVX2': part of the RL base's cache
    key and of every run's recorded versions, so weights built on other kernels are never mixed in."""
    import torch

    mkl = mkl_branch() if torch.backends.mkl.is_available() else "none"
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "auto") if torch.backends.mkldnn.is_available() else "none"
    return f"aten={torch.backends.cpu.get_cpu_capability()} mkl_cbwr={mkl} onednn={onednn}"


def mkl_branch() -> str:
    """The MKL code branch in effect, for kernel_signature. A branch whose code follows the CPU carries
    the CPU's vendor, family and model: AUTO (or MKL_CBWR unset), and a named branch other than
    COMPATIBLE on a CPU that is not Intel's, which MKL runs as AUTO: e.g. 'AUTO(AuthenticAMD 25/17)'.
    COMPATIBLE carries the vendor until its bytes are seen to agree across vendors (tests/test_golden.py
    has it for AMD only), so an RL base cached by one vendor's CPU is not loaded on the other's."""
    requested = os.environ.get("MKL_CBWR", "auto")
    branch = requested.split(",")[0].strip().upper().removeprefix("BRANCH=")
    vendor = _cpuinfo("vendor_id")
    if vendor is None:
        return requested
    if branch == "COMPATIBLE":
        return f"{requested}({vendor})"
    if branch == "AUTO" or vendor != "GenuineIntel":
        return f"AUTO({vendor} {_cpuinfo('cpu family')}/{_cpuinfo('model')})"
    return requested


def cpu_vendor() -> str:
    """The CPU's vendor id (Linux: /proc/cpuinfo), e.g. GenuineIntel or AuthenticAMD; 'unknown' elsewhere."""
    return _cpuinfo("vendor_id") or "unknown"


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()
