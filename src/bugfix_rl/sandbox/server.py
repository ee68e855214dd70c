"""The warm fork server: one process per worker, started once per Sandbox; its zygote forks one child per job.

Started by the parent as `<real interpreter> -I -S -B -c BOOT` (see workers.py), so it has the stdlib
and this package's stdlib-only modules, nothing else. It sets up the shared layers once (hardening.
setup_server), forks its zygote (zygote.py), proves the layers with a self-test child, then serves
jobs read from the parent pipe:

    parent -> server: wire.JOB_HEADER (wall limit, grading or not) + the job as marshal bytes, which
                      the server passes to the child unread
    zygote:           once: every job-independent step; then, forever: fork a child on three new
                      pipes, send the server its pid, a pidfd and the server's pipe ends, wait for
                      it, send its wait status. It receives nothing (zygote.py).
    child:            reads its job from its own pipe, hardens itself, then `R` on fd 3, then model
                      code -> one report on fd 3 -> _exit; if a step before model code fails: `E` +
                      the error on fd 3 -> _exit (job_child.py)
    server:           writes the job into the child's pipe, waits for the zygote's status message
                      (and reads the child's pipes) until the wall deadline (then SIGKILL through the
                      pidfd), empties the scratch dir (cleanup.remove_tree), replies (wire.REPLY_HEADER
                      + raw bytes).

Nothing the child prints or reports is interpreted here: it is capped and passed to the parent,
which validates it. The one exception is the first byte on fd 3, which the child writes before any
model code runs: `E` (set-up failed, the rest is its error) becomes the reply's `setup_error`, the
only way a job can end as an infrastructure failure (`sandbox_error`); model code that prints or
reports the words `sandbox_error` gets no such status.
"""

from __future__ import annotations

import gc
import json
import marshal
import os
import select
import signal
import socket
import sys
import time

from . import hardening, privileges, wire
from .cleanup import remove_tree
from .isolation import LAYERS, Isolation
from .job_child import SETUP_DONE, SETUP_FAILED
from .rlimits import Limits
from .zygote import ZygoteLost, child_status, start_zygote, take_child

STDOUT_HEAD, STDOUT_TAIL = 32 << 10, 16 << 10  # bytes of a test run's output kept: head + tail
MAX_RESULT = 8 << 20
WARM_MODULES = ("math", "re", "collections", "itertools", "functools", "operator", "typing",
                "dataclasses", "string", "random", "heapq", "bisect", "copy", "fractions",
                "decimal", "statistics", "enum", "unittest")  # common in model code; imported once here


def main(worker_index: int) -> None:
    request_fd, reply_fd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # a stray print here can never corrupt the protocol
    os.close(null)
    os.chdir("/")
    config = wire.read_frame(request_fd)
    stdlib_path = list(sys.path)
    for name in WARM_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass
    iso = hardening.setup_server(config["scratch_mb"])
    server = Server(iso, Limits(**config["limits"]), stdlib_path)
    gc.collect()
    gc.freeze()  # children never touch the zygote's objects' GC headers: fewer copy-on-write faults
    server.fork_zygote()  # before any request: the zygote's memory never holds job data
    server.prove_layers()
    wire.write_frame(reply_fd, {"layers": iso.layers, "reasons": iso.reasons, "uid": iso.uid,
                                "scratch": iso.scratch, "worker": worker_index})
    try:
        while (frame := wire.read_raw_frame(request_fd)) is not None:
            timeout_s, call = wire.JOB_HEADER.unpack_from(frame)
            wire.write_raw_frame(reply_fd, wire.encode_reply(**server.run_job(
                memoryview(frame)[wire.JOB_HEADER.size:], timeout_s, bool(call))))
    except ZygoteLost as lost:  # killed from outside: this server ends; the parent starts another
        print(f"sandbox server {worker_index}: {lost}", file=sys.stderr)
        sys.exit(1)
    finally:
        if not iso.layers["tmpfs"]:
            remove_tree(iso.scratch)


FIRST_WAIT_S = 0.025  # a job that exits sooner (most gradings, even on a busy machine) wakes the server once (_wait)


class Server:
    """One worker's server: its layers, its zygote's channel, and one job at a time."""

    def __init__(self, iso: Isolation, limits: Limits, stdlib_path: list[str]):
        self.iso, self.limits, self.stdlib_path = iso, limits, stdlib_path
        self.run_dir = os.path.join(iso.scratch, "run")  # one job at a time; emptied after each
        self.zygote_channel: socket.socket | None = None

    def fork_zygote(self) -> None:
        """Start the zygote, the only process jobs are forked from (zygote.py)."""
        self.zygote_channel = start_zygote(self.iso, self.limits, self.stdlib_path, self.run_dir)

    # ---- start-up proof: a hardened child probes every layer; a layer that does not hold is off

    def prove_layers(self) -> None:
        job = marshal.dumps({"kind": "selftest", "nonce": "selftest", "canary": wire.encode(()), "files": {},
                             "stdlib": os.path.dirname(os.__file__), "host_ipc": self.iso.host_ipc_namespace},
                            wire.MARSHAL_VERSION)
        for _ in range(len(LAYERS)):
            reply = self.run_job(job, 10.0, False)
            if reply["signal"] == signal.SIGKILL and not reply["timed_out"]:
                continue  # killed from outside (its layers were not the cause): run it again
            try:
                report = json.loads(reply["setup_error"] or reply["result"])
            except (TypeError, ValueError):
                report = {"sandbox_error": f"self-test child gave no report ({reply})", "step": "rlimits"}
            if "sandbox_error" in report:
                self._disable(report["step"], f"self-test: {report['sandbox_error']}")
                continue
            checks = report["checks"]
            failed = {"uid": not (checks["uid"] and checks["stdlib_readable"]),
                      "landlock": not checks["landlock"], "seccomp": not checks["seccomp"],
                      "ipcns": not checks["ipcns"], "seccomp_ipc": not checks["seccomp_ipc"]}
            failed = [name for name, bad in failed.items() if bad and self.iso.layers[name]]
            for name in failed:
                self._disable(name, "self-test: layer applied but did not hold")
            if not failed:
                return
        raise RuntimeError("sandbox self-test never passed")

    def _disable(self, layer: str, reason: str) -> None:
        if layer == "files" or not self.iso.layers.get(layer):
            raise RuntimeError(reason)
        self.iso.layers[layer] = False
        self.iso.reasons[layer] = reason
        if layer == "seccomp" and self.iso.layers["seccomp_ipc"]:
            self._disable("seccomp_ipc", f"needs seccomp ({reason})")

    # ---- one job

    def run_job(self, job: bytes, timeout_s: float, call: bool) -> dict:
        """Run one job (its marshal bytes, passed to the child unread): the reply's fields, as bytes."""
        started = time.monotonic()
        child = take_child(self.zygote_channel)
        pidfd = child.pidfd
        try:
            wire.write_raw_frame(child.job_write, job)
        except BrokenPipeError:  # the child died before reading it; _wait reports a set-up failure
            pass
        output_read = child.output_read
        if call:
            os.close(output_read)
            output_read = None
        try:
            reply = self._wait(child.pid, pidfd, child.result_read, output_read, started + timeout_s)
        finally:  # closed once the child is gone: closing it while the child reads makes both wait on the pipe's lock
            os.close(child.job_write)
        reply["duration_s"] = time.monotonic() - started
        if not self.iso.layers["seccomp"]:
            self._kill_leftovers()
        reply["leftover"] = not self._empty_scratch()
        return reply

    def _empty_scratch(self) -> bool:
        """Remove everything in the scratch dir (the run dir, and anything a job without the uid layer
        may have put beside it); True when it is empty."""
        remove_tree(self.run_dir)
        left = os.listdir(self.iso.scratch)
        for name in left:
            remove_tree(os.path.join(self.iso.scratch, name))
        return not left or not os.listdir(self.iso.scratch)

    def _wait(self, pid: int, pidfd: int, result_read: int, output_read: int | None, deadline: float) -> dict:
        """Collect the child's report and output until it exits (the zygote's status message) or the
        deadline passes (then SIGKILL). For the first FIRST_WAIT_S only the status is awaited: a job
        that ends by then wakes this server once, its report and output wait in the pipes (64 KiB
        each; a job that fills one sits until the pipes are read, FIRST_WAIT_S at most); after it,
        every pipe is read as it fills."""
        result, head, tail, dropped = bytearray(), bytearray(), bytearray(), 0
        pipes = [fd for fd in (result_read, output_read) if fd is not None]
        timed_out = False

        def take(fd: int, chunk: bytes) -> None:
            nonlocal dropped
            if fd == result_read:
                result.extend(chunk[: MAX_RESULT + 1 - len(result)])
                return
            room = STDOUT_HEAD - len(head)
            head.extend(chunk[:room])
            tail.extend(chunk[room:] if room > 0 else chunk)
            if len(tail) > STDOUT_TAIL:
                dropped += len(tail) - STDOUT_TAIL
                del tail[: len(tail) - STDOUT_TAIL]

        zygote = self.zygote_channel.fileno()
        watched = [zygote]  # then the pipes too, once the first wait is over
        first_until = time.monotonic() + FIRST_WAIT_S
        while True:
            now = time.monotonic()
            wait = deadline - now
            if wait <= 0:
                try:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                except ProcessLookupError:  # exited just now
                    pass
                timed_out = True
                break
            if len(watched) == 1:
                if now < first_until:
                    wait = min(wait, first_until - now)
                elif pipes:
                    watched += pipes
            ready = select.select(watched, [], [], wait)[0]
            for fd in ready:
                if fd == zygote:
                    continue
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    take(fd, chunk)
                else:
                    pipes.remove(fd)
                    watched.remove(fd)
            if zygote in ready:
                break
        status = child_status(self.zygote_channel)  # it has exited and been reaped; the next child is being forked
        os.close(pidfd)
        for fd in pipes:  # drain what the child left; never block (a forked leftover may hold the pipe)
            os.set_blocking(fd, False)
            try:
                while chunk := os.read(fd, 1 << 16):
                    take(fd, chunk)
            except BlockingIOError:
                pass
        for fd in (result_read, output_read):
            if fd is not None:
                os.close(fd)
        stdout = bytes(head) + (f"\n[... {dropped} bytes of output dropped ...]\n".encode() if dropped else b"")
        marker, report = bytes(result[:1]), bytes(result[1:])
        if marker == SETUP_FAILED:
            setup_error = report
        elif marker != SETUP_DONE:  # died (or timed out) before model code could run
            setup_error = json.dumps({"sandbox_error": "job child ended during set-up", "step": "files"}).encode()
        else:
            setup_error = None
        return {"exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "timed_out": timed_out, "setup_error": setup_error,
                "result": report if report and setup_error is None else None,  # the parent decodes both
                "result_overflow": len(result) > MAX_RESULT, "stdout": stdout + bytes(tail)}

    def _kill_leftovers(self) -> None:
        """Without seccomp a job can fork. The zygote killed its process group before reaping it
        (zygote.reap_with_group); a process that left the group (setsid) is killed here, by its uid."""
        if self.iso.layers["uid"]:
            privileges.kill_every_process_of(self.iso.uid)

