"""The trusted side of the sandbox: the public API (`Sandbox`), which builds each job and reads its reply.

Model code never runs in this process. `Sandbox` starts `workers` fork servers (workers.py, running
server.py), each a separate `python -I -S -B` process of the real interpreter binary; every job is
one request to an idle server, which forks a hardened child for it. This side only ever reads back
tagged JSON, checks the job's nonce, the canary and the number of outputs, and rebuilds plain values
from literals (results.py, wire.decode); grading (grading.py) compares those with expected values
that never leave this process. Only this side and the server declare an infrastructure failure
(`sandbox_error`): a lost server, or a set-up step that failed before any model code ran (the
server's `setup_error`); nothing the job prints or reports can.
"""

from __future__ import annotations

import os
import random
import shlex
import signal
import threading

from . import wire
from .results import CallResult, RunResult, call_outputs, detail_text, read_report, reported_exit
from .workers import WorkerPool

MAX_FILES = 256  # files per job; with their size (below) they must fit the run dir's tmpfs
NAME_MAX_BYTES = 255  # a path component, as the kernel allows


class Sandbox(WorkerPool):
    """Runs model-written code in hardened, forked children of warm fork servers.

    `layers` says which isolation layers are active on this machine (same for every worker);
    `reasons` gives a one-line reason for each inactive one. Thread-safe; a context manager. The
    servers' lifecycle (start, replace, close) is WorkerPool's (workers.py); this class is the
    public calls: what a job is, and what its reply means.
    """

    _faults: tuple[float, random.Random, threading.Lock] | None = None  # inject_grading_faults; None: off

    def inject_grading_faults(self, rate: float, seed: int = 0) -> None:
        """Test hook (`env.infra_fault_rate`): from now on each `call_function` (a grading) answers
        `sandbox_error` without running, with probability `rate`, drawn from its own seeded stream in
        call order; test runs (`run_tests`) are never touched. 0 turns it off."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must lie in [0, 1], got {rate}")
        self._faults = (rate, random.Random(seed), threading.Lock()) if rate > 0 else None

    def _injected_fault(self) -> bool:
        if self._faults is None:
            return False
        rate, rng, lock = self._faults
        with lock:
            return rng.random() < rate

    # ---- public calls

    def call_function(self, files: dict[str, str], module: str, function: str,
                      inputs: list[tuple]) -> CallResult:
        """Import `module` from `files` in a fresh sandbox and call `function(*args)` per input."""
        if self._injected_fault():
            return CallResult([], "sandbox_error", "injected fault (env.infra_fault_rate)")
        nonce, canary = _nonce_and_canary(3)
        inputs = [tuple(args) for args in inputs]
        for args in inputs:
            wire.encode(args)  # NotPlain (the caller's bug) for anything but plain values
        job = {"kind": "call", "files": self._checked(files), "module": module, "function": function,
               "inputs": inputs}  # plain values: marshal carries them to the job child as they are
        reply = self._submit(job, nonce, canary)
        if reply.get("lost") or reply.get("setup_error"):
            return CallResult([], "sandbox_error", str(reply.get("lost") or reply["setup_error"])[:300])
        report, problem = read_report(reply, nonce, canary)
        if reply["timed_out"] or reply["signal"] == signal.SIGXCPU:
            return CallResult([], "timeout", "wall clock" if reply["timed_out"] else "CPU limit")
        if report is None:
            return CallResult([], "crash", problem)
        if problem:
            return CallResult([], "bad_result", problem)
        if "import_error" in report:
            message = report["import_error"]
            if type(message) is not str:  # the runner writes a str; str() of a forged tree could be huge
                return CallResult([], "bad_result", f"malformed import_error: {type(message).__name__}")
            return CallResult([], "import_error", detail_text(message))
        return call_outputs(report.get("outputs"), len(inputs))

    def map_call_function(self, jobs: list[tuple]) -> list[CallResult]:
        """call_function(*job) for each (files, module, function, inputs), spread over the workers."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        return list(self._pool.map(lambda job: self.call_function(*job), jobs))

    def run_tests(self, files: dict[str, str], command: str, timeout_s: float | None = None) -> RunResult:
        """`pytest [args]`, `python -m pytest [args]` or `python file.py [args]` in a fresh run dir;
        `timeout_s` shortens the job's wall limit (never lengthens it): a caller's own time budget."""
        parsed = parse_command(command)
        if parsed is None:
            return RunResult(f"command not available in this sandbox: {command}", 127, "bad_command", 0.0)
        nonce, canary = _nonce_and_canary(1)
        reply = self._submit({"kind": parsed[0], "args": parsed[1], "files": self._checked(files)}, nonce, canary,
                             timeout_s)
        if reply.get("lost") or reply.get("setup_error"):
            return RunResult("", 1, "sandbox_error", 0.0)
        report, problem = read_report(reply, nonce, canary)
        if reply["timed_out"]:
            status, code = "timeout", 124
        elif report is not None and not problem:
            status, code = reported_exit(report)
        elif reply["signal"] is not None:
            status, code = ("timeout" if reply["signal"] == signal.SIGXCPU else "crash"), 128 + reply["signal"]
        else:  # exited without the runner's report: os._exit() in model code, or a forged report
            status, code = ("ok" if parsed[0] == "python" and not problem.startswith("bad") else "crash",
                            reply["exit_code"])
        code = code if type(code) is int else 1
        return RunResult(reply["stdout"], code, status, float(reply["duration_s"]))

    def _checked(self, files: dict[str, str]) -> dict[str, str]:
        """The job's files, or ValueError (a caller's bug, never a job's failure) for any the server
        could not write: a bad path, or more or larger files than the run dir holds."""
        if len(files) > MAX_FILES:
            raise ValueError(f"{len(files)} files; at most {MAX_FILES} per job")
        size = 0
        for path, text in files.items():
            if not isinstance(path, str) or not isinstance(text, str) or not valid_path(path):
                raise ValueError(f"file paths must be relative and inside the run dir: {path!r:.80}")
            size += len(text.encode("utf-8", "surrogatepass"))
        if size > (self.config.scratch_mb << 20) // 2:
            raise ValueError(f"files of {size} bytes do not fit the run dir ({self.config.scratch_mb} MiB)")
        return {str.__str__(path): str.__str__(text) for path, text in files.items()}  # exact str: marshal's


def _nonce_and_canary(size: int) -> tuple[str, tuple[int, ...]]:
    """A job's nonce (32 hex digits) and canary (`size` random 48-bit ints), from one os.urandom call."""
    data = os.urandom(16 + 6 * size)
    return data[:16].hex(), tuple(int.from_bytes(data[at:at + 6], "big") for at in range(16, len(data), 6))


def valid_path(path: str) -> bool:
    """A relative path inside the run dir that the server can create: no NUL, components of at most
    NAME_MAX_BYTES UTF-8 bytes (no lone surrogates), no `..`, not absolute, not empty."""
    if not path or "\0" in path or path.startswith("/"):
        return False
    try:
        parts = [part.encode("utf-8") for part in path.split("/") if part not in ("", ".")]
    except UnicodeEncodeError:
        return False
    return bool(parts) and all(len(part) <= NAME_MAX_BYTES and part != b".." for part in parts)


_PYTHON = ("python", "python3", "python3.11")
_PYTHON_FLAGS = ("-u", "-B", "-I", "-S", "-q", "-E", "-s")


def parse_command(command: str) -> tuple[str, list[str]] | None:
    """'pytest -q test_x.py' -> ('pytest', ['-q', 'test_x.py']); 'python x.py' -> ('python', ['x.py'])."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None
    if tokens and tokens[0] in ("pytest", "py.test"):
        return "pytest", tokens[1:]
    if not tokens or tokens[0] not in _PYTHON:
        return None
    rest = tokens[1:]
    while rest and rest[0] in _PYTHON_FLAGS:
        rest = rest[1:]
    if rest[:2] == ["-m", "pytest"]:
        return "pytest", rest[2:]
    if rest and rest[0].endswith(".py") and not rest[0].startswith("-"):
        return "python", rest
    return None
