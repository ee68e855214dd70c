"""The zygote: the one process a fork server's jobs are forked from, and the server's end of its channel.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.

Why a zygote: a job forked from the server would inherit the server's heap, and with it the freed
remnants of every earlier request (other rollouts' sources, the inputs sent to grading), which model
code can find by scanning its own address space. The zygote is forked before the first request and
never receives anything: it only forks, sends and reaps. So every job starts from memory that never
held another job's data, whichever kind (grading or test run) each job is.

Once, before its loop, the zygote does every job-independent step (rlimits but CPU, no_new_privs,
HOME, std streams, /dev/null, an index of sys.modules: `_prepare_zygote`); then, forever: fork a
child on three new pipes, send the server its pid, a pidfd and the server's pipe ends (SCM_RIGHTS),
wait for it, kill what it left in its process group, reap it (`reap_with_group`), send its wait status
(`_serve_forks`). The server takes each child (`take_child`) and learns that it ended from the status
alone (`child_status`).
"""

from __future__ import annotations

import dataclasses
import errno
import gc
import os
import signal
import socket
import struct

from . import privileges, rlimits, runner
from .isolation import Isolation
from .job_child import JobContext, child_from_pipe
from .syscalls import trim_heap

_CHILD = struct.Struct(">q")  # zygote -> server: a new child's pid, with its pidfd and the server's ends of its pipes
_STATUS = struct.Struct(">xq")  # zygote -> server: that child's wait status, once it has exited and been reaped
_FDS = struct.Struct("4i")  # SCM_RIGHTS data: the fds sent with a child's pid (socket.send_fds packs them alike)


@dataclasses.dataclass
class ZygoteChild:
    """A job child forked by the zygote, blocked on reading its job; the server's ends of its pipes."""

    pid: int
    job_write: int
    result_read: int
    output_read: int
    pidfd: int  # opened by the zygote before it could reap the child: never another process's


class ZygoteLost(RuntimeError):
    """The zygote died (it was killed: it never exits on its own while its server runs)."""


def start_zygote(iso: Isolation, limits: rlimits.Limits, stdlib_path: list[str], run_dir: str) -> socket.socket:
    """Fork the zygote (it dies with this server); return the server's end of their channel."""
    server_pid = os.getpid()
    server_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        server_end.close()
        try:
            privileges.die_with_parent(server_pid)
            context = _prepare_zygote(iso, limits, stdlib_path, run_dir)
            _serve_forks(zygote_end, context)
        finally:
            os._exit(0)
    zygote_end.close()
    return server_end


def _prepare_zygote(iso: Isolation, limits: rlimits.Limits, stdlib_path: list[str], run_dir: str) -> JobContext:
    """Every job-independent step a child would otherwise repeat, done once here, inherited by
    each fork: the rlimits other than CPU time (the zygote's own CPU time adds up; the child sets
    that one), SIGXFSZ ignored, no_new_privs, HOME, the standard streams and the index of loaded
    modules. None of it is request data: the zygote still never sees a job."""
    rlimits.apply_shared_rlimits(limits)
    privileges.set_no_new_privs()
    os.environ["HOME"] = run_dir  # the rest of the server's environment is PATH and LANG
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # each child's fds 0 (and 1-2 for grading)
    context = JobContext(iso, limits, stdlib_path, run_dir, os.getpid(), null, runner.Streams.build())
    runner.index_modules()
    gc.collect()
    gc.freeze()  # the objects built here too: children never write their GC headers
    trim_heap()  # free heap pages back to the kernel: fewer pages for each fork to map
    return context


def _serve_forks(channel: socket.socket, context: JobContext) -> None:
    """The zygote's loop: fork a child on three new pipes, hand the server the child's pid and the
    server's ends of the pipes, wait for the child to exit, tell the server its status; again.
    It receives nothing at all. The next child is forked as soon as the last one is reaped, so it
    is ready (blocked on reading its job) while the server replies to the parent; the server
    learns that a job ended from the status alone, with no round trip."""
    pipe, fork, close, pidfd_open, reap = os.pipe, os.fork, os.close, os.pidfd_open, reap_with_group
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
            child_from_pipe(context, job_read, result_write, output_write)
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
        status = reap(child)
        try:
            send(pack_status(status))
        except OSError:
            return


def reap_with_group(child: int) -> int:
    """Wait for `child` to exit, kill every process left in its process group, then reap it; its wait status.

    A job child calls setsid, so its pid is its group's id. Without seccomp a job can fork, and what it
    forks stays in that group. Killed here, between the child's exit and its reaping, while the child is
    a zombie that still holds its pid: the id names this job's group and no other process's, as it could
    once the child is reaped and the pid reused (the server killed the group after the reaping before).
    With seccomp there is nothing to kill but the zombie itself; a child that died before setsid leads
    no group (ESRCH)."""
    os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)
    try:
        os.killpg(child, signal.SIGKILL)
    except OSError as error:
        if error.errno not in (errno.ESRCH, errno.EPERM):  # no such group; a member that changed uid
            raise
    return os.waitpid(child, 0)[1]


def take_child(channel: socket.socket) -> ZygoteChild:
    """The zygote's next child (forked when the last one was reaped, so normally waiting already)."""
    try:
        message, fds, _, _ = socket.recv_fds(channel, _STATUS.size, 4)
    except OSError as error:  # ECONNRESET
        raise ZygoteLost(f"the zygote exited ({error})") from error
    if len(message) != _CHILD.size or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        raise ZygoteLost("the zygote exited")
    return ZygoteChild(_CHILD.unpack(message)[0], *fds)


def child_status(channel: socket.socket) -> int:
    """The wait status of the child the zygote was waiting for (blocks until it has exited)."""
    try:
        message = channel.recv(_STATUS.size + 1)
    except OSError as error:
        raise ZygoteLost(f"the zygote exited ({error})") from error
    if len(message) != _STATUS.size:
        raise ZygoteLost("the zygote exited")
    return _STATUS.unpack(message)[0]
