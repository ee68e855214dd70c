"""Which CPU kernels torch runs, chosen before torch loads (so `bugfix_rl` is imported before `torch`).

torch picks its vectorised ATen kernels, MKL its BLAS code path and oneDNN its JIT kernels by the CPU
they find (AVX2, AVX-512, ...), and each path rounds differently: the same seed gives other weights,
another RL base and other README numbers on another CPU. `BUGFIX_RL_KERNELS` chooses:

- `portable` (default): all three pinned to AVX2 (`ATEN_CPU_CAPABILITY=avx2`, MKL's conditional
  numerical reproducibility `MKL_CBWR=AVX2`, `ONEDNN_MAX_CPU_ISA=AVX2`), so x86-64 CPUs with AVX2 or
  AVX-512, Intel or AMD, run the same code paths and should compute the same bytes for the same seed
  and thread count (checked on one Xeon and one EPYC model). MKL runs a named CNR branch only where
  its vendor check (`mkl_serv_intel_cpu_true`) says Intel; elsewhere it runs its AUTO branch, whose
  matrix products round otherwise (an AMD EPYC, family 25 model 17, hashed the golden run to its own
  value). So on a CPU that is not Intel's and has what MKL's AVX2 code uses, pin_kernels compiles a
  one-line library that answers that check (INTEL_CHECK_SOURCE, with the system's C compiler, in a
  private temporary directory), loads it before torch and puts it on LD_PRELOAD for child processes:
  the EPYC then computes the Xeon's golden hash and prints the README's rows. Without a C compiler it
  keeps MKL's own answer and bytes of its own, and kernel_signature names the CPU.
  Measured on a 2-core AVX-512 Xeon: a GRPO step costs 1.14x and 1.23x the native one in two runs of
  `scripts/bench_kernels.py`; 1.08x on the EPYC (before the answer).
- `compatible`: as portable, with MKL on its COMPATIBLE branch (`MKL_CBWR=COMPATIBLE`: SSE2 without
  the approximate rcpps/rsqrtps), meant to be the same on every vendor's CPU without any answer to
  MKL's check; it is not: the EPYC computes one hash through both of MKL's dispatch paths and an Intel
  Xeon (6/207) another (tests/test_golden.py), so its signature names the vendor; its matrix products
  cost more (a behaviour-cloning step of the RL base 1.9-2.2x the
  portable one on the EPYC, measured before the answer: docs/PERFORMANCE.md).
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
# The answer to MKL's vendor check, so that MKL runs the CNR branch MKL_CBWR names on a CPU that is not
# Intel's (one with every instruction its AVX2 code uses: INTEL_CHECK_FLAGS).
INTEL_CHECK_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
INTEL_CHECK_FLAGS = frozenset({"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})
ANSWER_DIR_PREFIX, ANSWER_FILE = "bugfix_rl_mkl_", "intel_check.so"  # where the compiled answer lives
# "answered": this process loaded INTEL_CHECK_SOURCE; otherwise why not (or "" where no answer is needed)
mkl_vendor_check = ""
_mkl_branch_settled = False  # settle_mkl_branch has made MKL's first call in this process


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
    """Set the requested mode's MODE_ENV (where unset) on an x86-64 CPU with AVX2 and FMA (torch obeys
    ATEN_CPU_CAPABILITY without checking the CPU: on one without AVX2 the pin would crash, so such a CPU
    runs its native kernels), and on a CPU that is not Intel's answer MKL's vendor check when MKL_CBWR
    is AVX2 (_answer_mkls_vendor_check). In any mode an answer found preloaded (LD_PRELOAD from a
    parent) is recorded, since MKL obeys it. torch must not be loaded yet, or its ATen and MKL choices
    are already made: a warning says so, and kernel_signature reports what runs."""
    global mkl_vendor_check
    vendor = _cpuinfo("vendor_id")
    if not mkl_vendor_check and vendor not in (None, "GenuineIntel") and _preloaded_answer():
        mkl_vendor_check = "answered (preloaded)"  # a child of a process that answered it
    pins = MODE_ENV.get(requested_mode(), {})
    if not pins or not pinnable():
        return
    torch_loaded = "torch" in sys.modules
    if torch_loaded:
        warnings.warn("torch was imported before bugfix_rl: its CPU kernels are not pinned (import bugfix_rl first)",
                      stacklevel=3)
    for name, value in pins.items():
        os.environ.setdefault(name, value)
    if mkl_vendor_check or vendor in (None, "GenuineIntel"):
        return  # answered already (preloaded, or a re-import), or nothing to answer
    requested = os.environ.get("MKL_CBWR", "")
    if not _names_avx2(requested):
        if _branch_name(requested) != "COMPATIBLE":
            mkl_vendor_check = f"not answered: MKL_CBWR={requested} (only AVX2 is answered)"
        return
    if torch_loaded:
        mkl_vendor_check = "not answered: torch was loaded before bugfix_rl"
    else:
        _answer_mkls_vendor_check()


def env_for_mode(mode: str) -> dict[str, str]:
    """This process's environment for a child that pins `mode` itself: without the pinned variables and,
    unless the child is portable too, without this package's answer to MKL's check on LD_PRELOAD."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED_NAMES}
    if mode != "portable" and "LD_PRELOAD" in env:
        kept = [entry for entry in env["LD_PRELOAD"].split(":") if entry and not _is_our_answer(entry)]
        env["LD_PRELOAD"] = ":".join(kept)
        if not kept:
            del env["LD_PRELOAD"]
    return {**env, "BUGFIX_RL_KERNELS": mode}


def _is_our_answer(path: str) -> bool:
    return os.path.basename(path) == ANSWER_FILE and os.path.basename(os.path.dirname(path)).startswith(ANSWER_DIR_PREFIX)


def _branch_name(requested: str) -> str:
    """The branch an MKL_CBWR value names, upper case: 'AVX2' for 'avx2,STRICT' or 'BRANCH=AVX2'."""
    return requested.split(",")[0].strip().upper().removeprefix("BRANCH=")


def _names_avx2(requested: str) -> bool:
    """Whether MKL_CBWR asks for the AVX2 branch, the one pinned and the only one answered for."""
    return _branch_name(requested) == "AVX2"


def _preloaded_answer() -> bool:
    """Whether the global symbol scope already answers MKL's check with 1 ahead of MKL (preloaded)."""
    import ctypes

    try:
        return ctypes.CDLL(None).mkl_serv_intel_cpu_true() == 1
    except (AttributeError, OSError):
        return False


def _answer_mkls_vendor_check() -> None:
    """Compile INTEL_CHECK_SOURCE with the system's C compiler into a private temporary directory and
    load it into the global symbol scope ahead of torch's MKL; put it on LD_PRELOAD too, so that child
    processes (spawned ranks and workers, which may load torch before bugfix_rl) load it before anything
    else. The directory is removed at exit. Sets mkl_vendor_check to "answered", or to why not: then MKL
    keeps its own answer."""
    global mkl_vendor_check
    import atexit
    import ctypes
    import shutil
    import subprocess
    import tempfile

    missing = INTEL_CHECK_FLAGS - cpu_flags()
    compiler = next((path for path in map(shutil.which, ("cc", "gcc", "clang")) if path and os.path.isabs(path)), None)
    if missing or compiler is None:
        mkl_vendor_check = (f"not answered: the CPU lacks {', '.join(sorted(missing))}" if missing
                            else "not answered: no C compiler (cc, gcc or clang) on the PATH")
        return
    try:
        directory = tempfile.mkdtemp(prefix=ANSWER_DIR_PREFIX)  # mode 0700: no one else can swap the library
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        library = os.path.join(directory, ANSWER_FILE)
        built = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-x", "c", "-o", library, "-"],
                               input=INTEL_CHECK_SOURCE.encode(), capture_output=True, timeout=20)
        if built.returncode != 0:
            why = built.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {built.returncode}"]
            mkl_vendor_check = f"not answered: {os.path.basename(compiler)} failed: {why[0][:160]}"
            return
        ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    except Exception as error:  # noqa: BLE001  any failure here leaves MKL its own answer, never breaks the import
        mkl_vendor_check = f"not answered: {type(error).__name__}: {str(error)[:160]}"
        return
    os.environ["LD_PRELOAD"] = ":".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    mkl_vendor_check = "answered"


def kernel_signature() -> str:
    """What this process runs, e.g. 'aten=AVX2 mkl_cbwr=AVX2 onednn=AVX2': part of the RL base's cache
    key and of every run's recorded versions, so weights built on other kernels are never mixed in."""
    import torch

    mkl = mkl_branch() if torch.backends.mkl.is_available() else "none"
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "auto") if torch.backends.mkldnn.is_available() else "none"
    return f"aten={torch.backends.cpu.get_cpu_capability()} mkl_cbwr={mkl} onednn={onednn}"


def mkl_branch() -> str:
    """The MKL code branch in effect, for kernel_signature: MKL_CBWR as set where its code does not
    depend on the CPU's vendor (AVX2 on an Intel CPU, or on another once its vendor check is answered).
    A branch whose code follows the CPU carries the CPU's vendor, family and model: AUTO (or MKL_CBWR
    unset), and a named branch on a CPU that is not Intel's whose check was not answered, which MKL runs
    as AUTO: e.g. 'AUTO(AuthenticAMD 25/17)'. COMPATIBLE carries the vendor: MKL runs it alike through
    both of its dispatch paths on one CPU, but an AMD EPYC and an Intel Xeon compute different bytes on it
    (tests/test_golden.py), so an RL base cached by one vendor's CPU is not loaded on the other's."""
    requested = os.environ.get("MKL_CBWR", "auto")
    branch = _branch_name(requested)
    vendor = _cpuinfo("vendor_id")
    if vendor is None:
        return requested
    if branch == "COMPATIBLE":
        return f"{requested}({vendor})"
    answered = mkl_vendor_check.startswith("answered")
    if branch not in ("", "AUTO") and (vendor == "GenuineIntel" or answered):
        return requested
    # AUTO follows the CPU, and on this vendor's CPU differently once MKL's check is answered
    return f"AUTO({vendor} {_cpuinfo('cpu family')}/{_cpuinfo('model')}{', answered' if answered else ''})"


def cpu_vendor() -> str:
    """The CPU's vendor id (Linux: /proc/cpuinfo), e.g. GenuineIntel or AuthenticAMD; 'unknown' elsewhere."""
    return _cpuinfo("vendor_id") or "unknown"


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()



def set_torch_threads(threads: int) -> None:
    """torch.set_num_threads, with MKL's branch settled first (settle_mkl_branch): every place that
    sets the run's thread count calls this, before the run's first parallel MKL call."""
    import torch

    settle_mkl_branch()
    torch.set_num_threads(threads)


def settle_mkl_branch() -> None:
    """Make MKL's first call on one thread. MKL reads MKL_CBWR lazily, at its first call, and when two
    threads make that first call together one of them can run other code than the branch names: on
    the AMD EPYC, 2 of 12 fresh processes computed one half of a 2-thread torch.sqrt over 15,040 floats
    with other bits, and 1 in 4 fresh builds of the RL base on 2 threads differed in its last bits
    (Adam's sqrt over the token embedding), which failed tests/test_golden.py in the suite now and
    then. After one single-threaded call (30 of 30 fresh processes) every thread runs the same code.
    Once per process; a no-op without MKL."""
    global _mkl_branch_settled
    if _mkl_branch_settled:
        return
    import torch

    if torch.backends.mkl.is_available():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        torch.sqrt(torch.ones(1))  # ATen's float sqrt is MKL's VML, which reads MKL_CBWR
        torch.set_num_threads(threads)
    _mkl_branch_settled = True
