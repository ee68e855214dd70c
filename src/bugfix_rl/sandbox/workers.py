"""The fork servers behind a Sandbox: starting each one, one request at a time, replacing a lost one.

Each worker is a separate `python -I -S -B` process of the real interpreter binary (never a pyenv
shim) running server.py, which it reaches through `_BOOT` without the packages' `__init__`, so the
server loads stdlib-only modules. `_Worker` is one such process and its pipe; `WorkerPool` holds
all of them for a Sandbox (the base class of `Sandbox`, whose public calls build the jobs and read
the replies). A server that fails a request (silent past the job's limit plus SERVER_GRACE_S,
exited, a reply out of step) is replaced and its job is lost (`{"lost": ...}`, which the caller
reports as `sandbox_error`); one whose job left something it could not remove is replaced after
its reply.
"""

from __future__ import annotations

import marshal
import os
import queue
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

from . import wire
from .isolation import LAYERS
from .settings import SandboxConfig, SandboxUnavailable

SERVER_GRACE_S = 30.0  # a server silent this long past a job's own timeout is replaced
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


# ---------------------------------------------------------------- the pool

class WorkerPool:
    """The fork servers of a Sandbox, one per worker: started and checked against `min_isolation`
    together, each job frame handed to an idle one, a lost one replaced, all closed at the end.

    `layers` says which isolation layers are active on this machine (same for every worker);
    `reasons` gives a one-line reason for each inactive one; `uids` the uid each worker's jobs run
    as (None while its slot has no server). Thread-safe; a context manager.
    """

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

    def __enter__(self) -> Self:
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
            self.uids[worker.index] = None  # the dead server's uid is free: another sandbox may claim it
            return fresh
        weaker = [name for name in LAYERS if self.layers[name] and not hello["layers"][name]]
        if weaker:
            fresh.close()
            raise SandboxUnavailable(f"restarted sandbox server lost layers {weaker}")
        self._workers[self._workers.index(worker)] = fresh
        self.uids[worker.index] = hello["uid"]
        return fresh


def _job_frame(job: dict) -> bytes:
    """What the parent sends a server for one job: the header the server reads, then the job dict for
    the job child as marshal (stdlib, C, no shared references: see wire.JOB_HEADER)."""
    return wire.JOB_HEADER.pack(job["timeout_s"], job["kind"] == "call") + marshal.dumps(job, wire.MARSHAL_VERSION)
