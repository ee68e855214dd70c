"""The trusted side of the sandbox: fork-server workers, the public API, and grading.

Model-written code never runs in this process. `Sandbox` starts `workers` fork servers (server.py),
each a separate `python -I -S -B` process of the real interpreter binary; every job is one request
to an idle server, which forks a hardened child for it. This side only ever reads back tagged JSON,
checks the job's nonce, the canary and the number of outputs, and rebuilds plain values from
literals (wire.decode); grading compares those with expected values that never leave this process.
Model code can write its own report, so reading one is total: any bytes, any JSON, any field of any
type end as a status (`crash`, `bad_result`, ...) with a short detail, never as an exception here.
Only this side and the server declare an infrastructure failure (`sandbox_error`): a lost server, or
a set-up step that failed before any model code ran (the server's `setup_error`); nothing the job
prints or reports can.
"""

from __future__ import annotations

import hmac
import json
import marshal
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bugfix_rl.config import SandboxLimits

from . import wire
from .hardening import LAYERS

Outcome = tuple[str, object]  # ("value", plain value) or ("error", exception class name)
STATUSES = ("ok", "timeout", "crash", "import_error", "bad_result", "sandbox_error", "bad_command")
SERVER_GRACE_S = 30.0  # a server silent this long past a job's own timeout is replaced
MAX_FILES = 256  # files per job; with their size (below) they must fit the run dir's tmpfs
NAME_MAX_BYTES = 255  # a path component, as the kernel allows
_SRC_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = """
import sys, types
for name in ("bugfix_rl", "bugfix_rl.sandbox"):
    package = types.ModuleType(name)
    package.__path__ = [sys.argv[1] + "/" + name.replace(".", "/")]
    sys.modules[name] = package  # skips the packages' __init__: the server loads stdlib-only modules
from bugfix_rl.sandbox import server
server.main(int(sys.argv[2]))
"""


class SandboxUnavailable(RuntimeError):
    """A layer named in `min_isolation` cannot be had on this machine (or a server failed to start)."""


_DEFAULTS = SandboxLimits()  # the defaults are the config schema's (`env.sandbox.*`), written once there


@dataclass(frozen=True)
class SandboxConfig:
    timeout_s: float = _DEFAULTS.timeout_s
    """Wall-clock limit per job (a test run or a grading call batch); the job is killed past it."""
    cpu_s: int = _DEFAULTS.cpu_s
    """RLIMIT_CPU of the job process, in seconds."""
    memory_mb: int = _DEFAULTS.memory_mb
    """RLIMIT_AS (address space) of the job process, in MiB."""
    file_mb: int = _DEFAULTS.file_mb
    """RLIMIT_FSIZE: the largest file the job may write, in MiB."""
    nproc: int = _DEFAULTS.nproc
    """RLIMIT_NPROC for the job's uid (processes + threads; seccomp forbids both anyway)."""
    min_isolation: tuple[str, ...] = tuple(_DEFAULTS.min_isolation)
    """Layers that must be active, else the constructor raises SandboxUnavailable; see LAYERS."""
    workers: int = _DEFAULTS.workers
    """Fork servers, i.e. jobs run in parallel (one per core is right for grading)."""

    @classmethod
    def from_limits(cls, limits: SandboxLimits) -> SandboxConfig:
        """The sandbox of a run's `env.sandbox` settings."""
        return cls(**{**asdict(limits), "min_isolation": tuple(limits.min_isolation)})

    def __post_init__(self):
        object.__setattr__(self, "min_isolation", tuple(self.min_isolation))
        unknown = [name for name in self.min_isolation if name not in LAYERS]
        if unknown:
            raise ValueError(f"min_isolation: unknown layer {unknown[0]!r}; valid: {', '.join(LAYERS)}")
        for name in ("timeout_s", "cpu_s", "memory_mb", "file_mb", "nproc", "workers"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")

    @property
    def scratch_mb(self) -> int:
        """Size of each worker's private tmpfs for run dirs: room for 16 maximal files."""
        return 16 * self.file_mb


@dataclass(frozen=True)
class CallResult:
    """Outputs of one module's function on each input, in order (empty unless status == 'ok')."""

    outputs: list[Outcome]
    status: str
    detail: str = ""


@dataclass(frozen=True)
class RunResult:
    """A `pytest` / `python x.py` run for the tools env's Bash tool. `stdout` has stderr merged in,
    is capped (head + tail) and is model-written text: show it to the agent, never grade on it."""

    stdout: str
    exit_code: int
    status: str
    duration_s: float


@dataclass(frozen=True)
class GradeResult:
    """Per-case verdicts computed in this process; `flags` names anything suspicious or abnormal."""

    passed: list[bool]
    all_passed: bool
    status: str
    flags: frozenset[str] = field(default_factory=frozenset)


# ---------------------------------------------------------------- workers

def _interpreter() -> str:
    """The interpreter binary itself (a pyenv shim is a shell script costing ~100 ms per start)."""
    for candidate in (sys.executable, getattr(sys, "_base_executable", "")):
        try:
            with open(os.path.realpath(candidate), "rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    return candidate
        except OSError:
            continue
    raise SandboxUnavailable(f"no interpreter binary found (sys.executable={sys.executable!r} is not ELF)")


class _WorkerLost(Exception):
    pass


class _Worker:
    def __init__(self, config: SandboxConfig, index: int):
        self.index = index
        self.process = subprocess.Popen(
            [_interpreter(), "-I", "-S", "-B", "-c", _BOOT, _SRC_ROOT, str(index)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True, start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        self.write_fd, self.read_fd = self.process.stdin.fileno(), self.process.stdout.fileno()
        self.closed = False  # once closed, its fd numbers may belong to something else: never used again
        limits = {"cpu_s": config.cpu_s, "memory_mb": config.memory_mb, "file_mb": config.file_mb,
                  "nproc": config.nproc}
        self.closed_early = False  # the server exited before it read its limits (hello() says how)
        try:
            wire.write_frame(self.write_fd, {"limits": limits, "scratch_mb": config.scratch_mb})
        except BrokenPipeError:
            self.closed_early = True

    def hello(self, timeout_s: float = 60.0) -> dict:
        hello, reason = None, "it exited before reading its limits; "
        if not self.closed_early:
            try:
                hello, reason = wire.read_frame(self.read_fd, time.monotonic() + timeout_s), ""
            except (TimeoutError, ValueError) as error:
                hello, reason = None, f"{error}; "
        if hello is None:
            try:
                self.process.wait(timeout=5)  # its exit code, for the message
            except subprocess.TimeoutExpired:
                pass
            self.close()
            raise SandboxUnavailable(f"sandbox server {self.index} failed to start "
                                     f"({reason}exit code {self.process.returncode}; see stderr)")
        return hello

    def request(self, frame: bytes, timeout_s: float) -> dict:
        """Send one job frame (`_job_frame`), return the server's reply."""
        if self.closed:  # a restart that failed (e.g. the new server was killed while starting)
            raise _WorkerLost("sandbox server not running")
        try:
            wire.write_raw_frame(self.write_fd, frame)
            reply = wire.read_raw_frame(self.read_fd, time.monotonic() + timeout_s)
            if reply is not None:
                return wire.decode_reply(reply)
        except (OSError, TimeoutError, ValueError) as error:
            raise _WorkerLost(f"{type(error).__name__}: {error}") from error
        raise _WorkerLost(f"sandbox server exited (code {self.process.poll()})")

    def close(self) -> None:
        self.closed = True
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)  # end of input: the server finishes its job and exits
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


# ---------------------------------------------------------------- the sandbox

class Sandbox:
    """Runs model-written code in hardened, forked children of warm fork servers.

    `layers` says which isolation layers are active on this machine (same for every worker);
    `reasons` gives a one-line reason for each inactive one. Thread-safe; a context manager.
    """

    _faults: tuple[float, random.Random, threading.Lock] | None = None  # inject_grading_faults; None: off

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._workers: list[_Worker] = []
        self._closed = False
        try:
            self._workers = [_Worker(self.config, index) for index in range(self.config.workers)]
            hellos = [worker.hello() for worker in self._workers]
        except BaseException:
            self.close()
            raise
        self.layers = {name: all(hello["layers"][name] for hello in hellos) for name in LAYERS}
        self.reasons = {name: next(h["reasons"].get(name, "") for h in hellos if not h["layers"][name])
                        for name in LAYERS if not self.layers[name]}
        self.uids = [hello["uid"] for hello in hellos]
        missing = [name for name in self.config.min_isolation if not self.layers[name]]
        if missing:
            self.close()
            details = "; ".join(f"{name}: {self.reasons[name]}" for name in missing)
            raise SandboxUnavailable(f"required sandbox layers unavailable ({details}); "
                                     f"min_isolation={list(self.config.min_isolation)}")
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="sandbox")

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

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the servers exit on end of input anyway
            pass

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if hasattr(self, "_pool"):
            self._pool.shutdown(wait=True)
        for worker in self._workers:
            worker.close()

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
        report, problem = _read_report(reply, nonce, canary)
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
            return CallResult([], "import_error", _text(message))
        return _call_outputs(report.get("outputs"), len(inputs))

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
        report, problem = _read_report(reply, nonce, canary)
        if reply["timed_out"]:
            status, code = "timeout", 124
        elif report is not None and not problem:
            status, code = _reported_exit(report)
        elif reply["signal"] is not None:
            status, code = ("timeout" if reply["signal"] == signal.SIGXCPU else "crash"), 128 + reply["signal"]
        else:  # exited without the runner's report: os._exit() in model code, or a forged report
            status, code = ("ok" if parsed[0] == "python" and not problem.startswith("bad") else "crash",
                            reply["exit_code"])
        code = code if type(code) is int else 1
        return RunResult(reply["stdout"], code, status, float(reply["duration_s"]))

    # ---- plumbing

    def _submit(self, job: dict, nonce: str, canary: tuple, timeout_s: float | None = None) -> dict:
        if self._closed:
            raise RuntimeError("sandbox is closed")
        limit = self.config.timeout_s if timeout_s is None else max(0.0, min(timeout_s, self.config.timeout_s))
        job.update(nonce=nonce, canary=wire.encode(canary), timeout_s=limit)
        frame = _job_frame(job)
        worker = self._idle.get()
        try:
            reply = worker.request(frame, limit + SERVER_GRACE_S)
            if reply.get("leftover"):  # the job left something its server could not remove: start afresh
                worker = self._replace(worker)
            return reply
        except _WorkerLost as lost:
            worker = self._replace(worker)
            return {"lost": str(lost)}
        except BaseException:  # e.g. KeyboardInterrupt mid-reply: that pipe is out of step for good
            worker = self._replace(worker)
            raise
        finally:
            self._idle.put(worker)

    def _replace(self, worker: _Worker) -> _Worker:
        """A new server in `worker`'s slot. One that fails to start (killed while starting, say) takes
        the slot closed: its next job is lost (`sandbox_error`) and tries again. One with fewer layers
        than the sandbox reported raises SandboxUnavailable."""
        worker.close()
        fresh = _Worker(self.config, worker.index)
        try:
            hello = fresh.hello()
        except SandboxUnavailable:  # hello() closed it
            self._workers[self._workers.index(worker)] = fresh
            return fresh
        weaker = [name for name in LAYERS if self.layers[name] and not hello["layers"][name]]
        if weaker:
            fresh.close()
            raise SandboxUnavailable(f"restarted sandbox server lost layers {weaker}")
        self._workers[self._workers.index(worker)] = fresh
        self.uids[worker.index] = hello["uid"]
        return fresh

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


def _job_frame(job: dict) -> bytes:
    """What the parent sends a server for one job: the header the server reads, then the job dict for
    the job child as marshal (stdlib, C, no shared references: see wire.JOB_HEADER)."""
    return wire.JOB_HEADER.pack(job["timeout_s"], job["kind"] == "call") + marshal.dumps(job, wire.MARSHAL_VERSION)


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


def _read_report(reply: dict, nonce: str, canary: tuple) -> tuple[dict | None, str]:
    """(report, problem): report is None when there is none; problem is '' when it checks out."""
    if reply.get("lost"):
        return None, "sandbox server lost"
    if not reply.get("result"):
        exit_code, signal_number = reply.get("exit_code"), reply.get("signal")
        return None, (f"killed by signal {signal_number}" if signal_number else f"exited with {exit_code} "
                      "before reporting")
    try:
        report = json.loads(reply["result"])
    except (ValueError, RecursionError):  # bad UTF-8 and ints past the digit limit are ValueErrors
        return None, "bad report: not JSON"
    claimed = report.get("nonce") if type(report) is dict else None
    # compared as bytes: compare_digest raises TypeError on a str with non-ASCII characters
    if type(claimed) is not str or not hmac.compare_digest(claimed.encode("utf-8", "surrogatepass"),
                                                           nonce.encode()):
        return None, "bad report: wrong nonce"
    if reply.get("result_overflow"):
        return report, "bad report: too large"
    try:
        canary_ok = wire.decode(report.get("canary")) == canary
    except ValueError:  # decode raises nothing else
        canary_ok = False
    return report, "" if canary_ok else "bad report: canary mismatch"


def _call_outputs(outputs, count: int) -> CallResult:
    """The CallResult of a checked report's `outputs` (any JSON value: the report may be forged with
    a stolen nonce): one outcome per input, else `bad_result`."""
    if type(outputs) is not list:
        return CallResult([], "bad_result", f"malformed outputs: {type(outputs).__name__}")
    if len(outputs) != count:
        return CallResult([], "bad_result", f"{len(outputs)} outputs for {count} inputs")
    try:
        return CallResult([_outcome(item) for item in outputs], "ok")
    except ValueError as error:
        return CallResult([], "bad_result", _text(f"malformed outputs: {error}"))


def _reported_exit(report: dict) -> tuple[str, int]:
    """(status, exit code) of a checked test-run report. The runner writes an int, or `true` for
    sys.exit(True) (read as 1, as it always was); any other value is forged: `bad_result`."""
    code = report.get("exit_code")
    if type(code) is int:
        return "ok", code
    return ("ok", 1) if type(code) is bool else ("bad_result", 1)


def _text(message: str, limit: int = 300) -> str:
    """A report's message cut to `limit` characters, lone surrogates (which JSON's \\udXXX escapes
    let a report carry) replaced by '?', so that printing or logging the detail cannot raise."""
    return message[:limit].encode("utf-8", "replace").decode("utf-8")


def _outcome(item) -> Outcome:
    if type(item) is list and len(item) == 2 and item[0] == "value":
        return ("value", wire.decode(item[1]))
    if type(item) is list and len(item) == 2 and item[0] == "error" and type(item[1]) is str:
        return ("error", item[1][:100])
    raise ValueError(f"malformed outcome {item!r:.80}")


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


# ---------------------------------------------------------------- grading

def grade(sandbox: Sandbox, source: str, module: str, function: str,
          cases: list[tuple[tuple, object]]) -> GradeResult:
    """Run `function` from `source` (alone in its run dir as `<module>.py`) on each case's arguments;
    a case passes when the returned plain value equals its expected value, compared here."""
    return grade_many(sandbox, [(source, module, function, cases)])[0]


def grade_many(sandbox: Sandbox, jobs: list[tuple[str, str, str, list]]) -> list[GradeResult]:
    """grade() for each (source, module, function, cases), in parallel over the sandbox's workers."""
    calls = sandbox.map_call_function([({f"{module}.py": source}, module, function,
                                        [tuple(args) for args, _ in cases])
                                       for source, module, function, cases in jobs])
    return [_verdict(call, job[3]) for call, job in zip(calls, jobs)]


def _verdict(call: CallResult, cases: list[tuple[tuple, object]]) -> GradeResult:
    passed = [False] * len(cases)
    if call.status == "ok":
        passed = [kind == "value" and wire.plain_equal(value, want)
                  for (kind, value), (_, want) in zip(call.outputs, cases)]
    flags = set() if call.status == "ok" else {call.status}
    if any(outcome == ("error", "NotPlainValue") for outcome in call.outputs):
        flags.add("non_plain_output")
    return GradeResult(passed, bool(cases) and all(passed), call.status, frozenset(flags))
