"""The warm fork server: one process per worker, started once per Sandbox; it forks one child per job.

Started by the parent as `<real interpreter> -I -S -B -c BOOT` (see sandbox.py), so it has the stdlib
and this package's stdlib-only modules, nothing else. It sets up the shared layers once (hardening.
setup_server), forks its zygote, proves the layers with a self-test child, then serves jobs read
from the parent pipe:

    parent -> server: wire.JOB_HEADER (wall limit, grading or not) + the job as marshal bytes, which
                      the server passes to the child unread
    zygote:           once: every job-independent step (rlimits but CPU, no_new_privs, HOME, std
                      streams, /dev/null, an index of sys.modules); then, forever: fork a child on
                      three new pipes, send the server its pid, a pidfd and the server's pipe ends
                      (SCM_RIGHTS), wait for it, send its wait status. It receives nothing.
    child:            blocks on reading its job from its own pipe, then: setsid, fds 0-4 only,
                      run dir from the job's files, RLIMIT_CPU, own uid, Landlock, seccomp, then `R`
                      on fd 3, then runner.run (model code) -> one report on fd 3 -> _exit; if a step
                      before model code fails: `E` + the error on fd 3 -> _exit
    server:           writes the job into the child's pipe, waits for the zygote's status message
                      (and reads the child's pipes) until the wall deadline (then SIGKILL through the
                      pidfd), empties the scratch dir, replies (wire.REPLY_HEADER + raw bytes).

Why a zygote: a job forked from the server would inherit the server's heap, and with it the freed
remnants of every earlier request (other rollouts' sources, the inputs sent to grading), which model
code can find by scanning its own address space. The zygote is forked before the first request and
never receives anything: it only forks, sends and reaps. So every job starts from memory that never
held another job's data, whichever kind (grading or test run) each job is.

Nothing the child prints or reports is interpreted here: it is capped and passed to the parent,
which validates it. The one exception is the first byte on fd 3, which the child writes before any
model code runs: `E` (set-up failed, the rest is its error) becomes the reply's `setup_error`, the
only way a job can end as an infrastructure failure (`sandbox_error`); model code that prints or
reports the words `sandbox_error` gets no such status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import gc
import json
import marshal
import os
import select
import signal
import socket
import struct
import sys
import time

from . import hardening, runner, wire

STDOUT_HEAD, STDOUT_TAIL = 32 << 10, 16 << 10  # bytes of a test run's output kept: head + tail
MAX_RESULT = 8 << 20
EXIT_SANDBOX_ERROR = 70
SETUP_DONE, SETUP_FAILED = b"R", b"E"  # the first byte on fd 3, written by the child before model code
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
    server = Server(iso, hardening.Limits(**config["limits"]), stdlib_path)
    gc.collect()
    gc.freeze()  # children never touch the zygote's objects' GC headers: fewer copy-on-write faults
    server.start_zygote()  # before any request: the zygote's memory never holds job data
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


_CHILD = struct.Struct(">q")  # zygote -> server: a new child's pid, with its pidfd and the server's ends of its pipes
_STATUS = struct.Struct(">xq")  # zygote -> server: that child's wait status, once it has exited and been reaped
_FDS = struct.Struct("4i")  # SCM_RIGHTS data: the fds sent with a child's pid (socket.send_fds packs them alike)
FIRST_WAIT_S = 0.025  # a job that exits sooner (most gradings, even on a busy machine) wakes the server once (_wait)


@dataclasses.dataclass
class _Child:
    """A job child forked by the zygote, blocked on reading its job; the server's ends of its pipes."""

    pid: int
    job_write: int
    result_read: int
    output_read: int
    pidfd: int  # opened by the zygote before it could reap the child: never another process's


class ZygoteLost(RuntimeError):
    """The zygote died (it was killed: it never exits on its own while its server runs)."""


class Server:
    def __init__(self, iso: hardening.Isolation, limits: hardening.Limits, stdlib_path: list[str]):
        self.iso, self.limits, self.stdlib_path = iso, limits, stdlib_path
        self.pid = os.getpid()  # in the zygote and its children: the zygote's pid (the jobs' parent)
        self.run_dir = os.path.join(iso.scratch, "run")  # one job at a time; emptied after each
        self.streams: runner.Streams | None = None  # built by the zygote, used by each job child
        self.null = -1  # the zygote's /dev/null
        self.zygote: socket.socket | None = None

    # ---- the zygote: the only process jobs are forked from

    def start_zygote(self) -> None:
        server_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            server_end.close()
            try:
                hardening.die_with_parent(self.pid)
                self.pid = os.getpid()
                self._prepare_zygote()
                self._serve_forks(zygote_end)
            finally:
                os._exit(0)
        zygote_end.close()
        self.zygote = server_end

    def _prepare_zygote(self) -> None:
        """Every job-independent step a child would otherwise repeat, done once here, inherited by
        each fork: the rlimits other than CPU time (the zygote's own CPU time adds up; the child sets
        that one), SIGXFSZ ignored, no_new_privs, HOME, the standard streams and the index of loaded
        modules. None of it is request data: the zygote still never sees a job."""
        hardening.apply_shared_rlimits(self.limits)
        hardening.set_no_new_privs()
        os.environ["HOME"] = self.run_dir  # the rest of the server's environment is PATH and LANG
        self.null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # each child's fds 0 (and 1-2 for grading)
        self.streams = runner.Streams.build()
        runner.index_modules()
        gc.collect()
        gc.freeze()  # the objects built here too: children never write their GC headers
        hardening.trim_heap()  # free heap pages back to the kernel: fewer pages for each fork to map

    def _serve_forks(self, channel: socket.socket) -> None:
        """The zygote's loop: fork a child on three new pipes, hand the server the child's pid and the
        server's ends of the pipes, wait for the child to exit, tell the server its status; again.
        It receives nothing at all. The next child is forked as soon as the last one is reaped, so it
        is ready (blocked on reading its job) while the server replies to the parent; the server
        learns that a job ended from the status alone, with no round trip."""
        pipe, fork, close, pidfd_open, waitpid = os.pipe, os.fork, os.close, os.pidfd_open, os.waitpid
        sendmsg, send, channel_fd = channel.sendmsg, channel.send, channel.fileno()
        rights, pack_child, pack_status, pack_fds = socket.SCM_RIGHTS, _CHILD.pack, _STATUS.pack, _FDS.pack
        level = socket.SOL_SOCKET
        # Plain local calls only: after each fork, every page this loop writes (a reference count, a
        # new object) is copied for the zygote while the child lives, then write-faulted again.
        while True:
            job_read, job_write = pipe()
            result_read, result_write = pipe()
            output_read, output_write = pipe()
            child = fork()
            if child == 0:  # the job pipe must end (EOF) when the server goes; the rest is the server's
                close(channel_fd)
                close(job_write)
                close(result_read)
                close(output_read)
                self._child_from_pipe(job_read, result_write, output_write)
            close(job_read)
            close(result_write)
            close(output_write)
            pidfd = pidfd_open(child)
            try:
                sendmsg([pack_child(child)], [(level, rights, pack_fds(job_write, result_read, output_read, pidfd))])
            except OSError:
                return  # the server is gone (this zygote dies with it anyway)
            finally:
                close(job_write)
                close(result_read)
                close(output_read)
                close(pidfd)
            status = waitpid(child, 0)[1]
            try:
                send(pack_status(status))
            except OSError:
                return

    def _child_from_pipe(self, job_read: int, result_write: int, output_write: int) -> None:
        """A fresh job child: its job is the first and only request data this process ever holds."""
        try:
            job = marshal.loads(wire.read_sole_frame(job_read))  # written by the server, from the parent
            os.close(job_read)
            job["dir"] = self.run_dir
            if job["kind"] == "call":  # grading calls' output is not kept
                os.close(output_write)
                output_write = None
        except BaseException:
            os._exit(EXIT_SANDBOX_ERROR)
        self._child(job, result_write, output_write)  # never returns

    def _take_child(self) -> _Child:
        """The zygote's next child (forked when the last one was reaped, so normally waiting already)."""
        try:
            message, fds, _, _ = socket.recv_fds(self.zygote, _STATUS.size, 4)
        except OSError as error:  # ECONNRESET
            raise ZygoteLost(f"the zygote exited ({error})") from error
        if len(message) != _CHILD.size or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            raise ZygoteLost("the zygote exited")
        return _Child(_CHILD.unpack(message)[0], *fds)

    def _status_from_zygote(self) -> int:
        """The wait status of the child the zygote was waiting for (blocks until it has exited)."""
        try:
            message = self.zygote.recv(_STATUS.size + 1)
        except OSError as error:
            raise ZygoteLost(f"the zygote exited ({error})") from error
        if len(message) != _STATUS.size:
            raise ZygoteLost("the zygote exited")
        return _STATUS.unpack(message)[0]

    # ---- start-up proof: a hardened child probes every layer; a layer that does not hold is off

    def prove_layers(self) -> None:
        job = marshal.dumps({"kind": "selftest", "nonce": "selftest", "canary": wire.encode(()), "files": {},
                             "stdlib": os.path.dirname(os.__file__), "host_ipc": self.iso.host_ipc_namespace},
                            wire.MARSHAL_VERSION)
        for _ in range(len(hardening.LAYERS)):
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
        child = self._take_child()
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
            self._kill_leftovers(child.pid)
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

    def _child(self, job: dict, result_write: int, output_write: int | None) -> None:
        step = "files"
        try:
            os.setsid()
            null = self.null
            ruleset = self.iso.landlock_ruleset_fd if self.iso.layers["landlock"] else null
            output = null if output_write is None else output_write
            wanted = (null, output, output, result_write, ruleset)
            if min(wanted) < len(wanted):  # a source among fds 0-4: move every source above them first
                wanted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(wanted)) for fd in wanted]
            for target, fd in enumerate(wanted):
                os.dup2(fd, target, inheritable=target < 3)
            os.closerange(len(wanted), 1 << 20)  # the zygote's channel, the parent pipe, the uid claim, ...
            self.iso.landlock_ruleset_fd = 4
            self._write_files(job)
            os.chdir(job["dir"])  # HOME, set by the zygote
            step = "rlimits"
            hardening.apply_cpu_rlimit(self.limits)  # the others are the zygote's, inherited
            step = "ipcns"
            hardening.enter_job_ipcns(self.iso)
            step = "uid"
            hardening.drop_privileges(self.iso, self.pid)
            step = "landlock"
            hardening.apply_landlock(self.iso)
            step = "seccomp"
            hardening.apply_seccomp(self.iso)
            os.write(runner.RESULT_FD, SETUP_DONE)  # from here on, fd 3 carries model-reachable bytes
        except BaseException as error:
            message = json.dumps({"sandbox_error": f"{type(error).__name__}: {error}", "step": step})
            try:
                os.write(runner.RESULT_FD, SETUP_FAILED + message.encode())
            finally:
                os._exit(EXIT_SANDBOX_ERROR)
        try:
            runner.run(job, self.stdlib_path, self.streams)
        finally:
            os._exit(EXIT_SANDBOX_ERROR)

    def _write_files(self, job: dict) -> None:
        owner = self.iso.uid if self.iso.layers["uid"] else None
        os.mkdir(job["dir"], 0o700)
        made = [job["dir"]]
        for relative, text in job["files"].items():
            if "/" not in relative and relative not in ("", ".", ".."):  # a name in the run dir itself
                path = f"{job['dir']}/{relative}"
            else:
                path = os.path.normpath(os.path.join(job["dir"], relative))
                if os.path.commonpath([path, job["dir"]]) != job["dir"] or path == job["dir"]:
                    raise ValueError(f"file path outside the run dir: {relative!r}")
                steps = os.path.relpath(os.path.dirname(path), job["dir"]).split(os.sep)
                for depth in range(1, len(steps) + 1) if steps != ["."] else ():
                    directory = os.path.join(job["dir"], *steps[:depth])
                    if directory not in made:
                        os.mkdir(directory, 0o700)
                        made.append(directory)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                data = memoryview(text.encode("utf-8", "surrogatepass"))  # a lone surrogate: model's bad bytes
                while data:
                    data = data[os.write(fd, data):]
                if owner is not None:
                    os.fchown(fd, owner, owner)
            finally:
                os.close(fd)
        if owner is not None:
            for directory in made:
                os.chown(directory, owner, owner)

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

        zygote = self.zygote.fileno()
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
        status = self._status_from_zygote()  # it has exited and been reaped; the next child is being forked
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

    def _kill_leftovers(self, pid: int) -> None:
        """Without seccomp a job can fork: kill its process group, and every process of its uid."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError as error:
            if error.errno != errno.ESRCH:
                raise
        if self.iso.layers["uid"]:
            reaper = os.fork()
            if reaper == 0:
                try:
                    os.setresuid(self.iso.uid, self.iso.uid, self.iso.uid)
                    os.kill(-1, signal.SIGKILL)  # as that uid: reaches that uid's processes only
                finally:
                    os._exit(0)
            os.waitpid(reaper, 0)


# ---- clean-up of what a job leaves in its run dir

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: str) -> bool:
    """`rm -rf path` for a tree a job built: without recursion (a job can nest directories far past
    Python's recursion limit and PATH_MAX), with one directory fd open at a time (walking back up
    through `..`), never following a symbolic link, and without raising. True when `path` is gone."""
    try:
        fd = os.open(path, _DIRECTORY)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return not os.path.lexists(path)
    pending = [_remove_files(fd)]  # per level from `path` down: subdirectories still to remove
    try:
        while pending:
            if pending[-1]:
                child = _open_subdirectory(pending[-1][-1], fd)
                if child is None:
                    pending[-1].pop()
                    continue
                os.close(fd)
                fd = child
                pending.append(_remove_files(fd))
                continue
            pending.pop()
            if pending:  # this level is empty: go up and remove it
                parent = os.open("..", _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = parent
                with contextlib.suppress(OSError):
                    os.rmdir(pending[-1].pop(), dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)
    return not os.path.lexists(path)


def _remove_files(fd: int) -> list[str]:
    """Unlink every entry of the directory `fd` that is not a directory; return the subdirectories."""
    directories = []
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return directories
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                directories.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
        except OSError:
            pass
    return directories


def _open_subdirectory(name: str, parent: int) -> int | None:
    """The directory `name` in `parent`, made accessible first if the job took its permissions away
    (matters without root); None if it cannot be opened (then it is unlinked if it is not a directory)."""
    for attempt in range(2):
        try:
            return os.open(name, _DIRECTORY, dir_fd=parent)
        except PermissionError:
            if attempt == 0:
                with contextlib.suppress(OSError):
                    os.chmod(name, 0o700, dir_fd=parent)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=parent)
            return None
    return None
