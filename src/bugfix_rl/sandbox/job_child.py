"""A job child, from its fork by the zygote until model code runs: it hardens itself, then runs its job.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
The child blocks on reading its job from its own pipe (the first and only request data this process
ever holds), then: setsid, fds 0-4 only, the run dir from the job's files, RLIMIT_CPU, its own IPC
namespace where seccomp cannot deny IPC, its own uid, Landlock, seccomp; then `R` on fd 3 and
runner.run (model code), which writes one report on fd 3; then _exit. If a step before model code
fails: `E` and the error on fd 3, then _exit. That first byte is the only one the server reads
(server.Server._wait): nothing model code writes after `R` can make a job a `sandbox_error`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import marshal
import os

from . import landlock, namespaces, privileges, rlimits, runner, seccomp, wire
from .isolation import Isolation

EXIT_SANDBOX_ERROR = 70
SETUP_DONE, SETUP_FAILED = b"R", b"E"  # the first byte on fd 3, written by the child before model code


@dataclasses.dataclass
class JobContext:
    """What every job child inherits from the zygote (built there once, before any request)."""

    iso: Isolation  # the server's layers; each child applies them to itself
    limits: rlimits.Limits  # all but RLIMIT_CPU already set by the zygote
    stdlib_path: list[str]  # the server's sys.path, for runner.run
    run_dir: str  # one job at a time; HOME
    zygote_pid: int  # the jobs' parent: a child that outlives it exits (privileges.drop_privileges)
    null: int  # the zygote's /dev/null: each child's fd 0 (and 1-2 for grading)
    streams: runner.Streams  # the job's sys.stdin/stdout/stderr wrappers


def child_from_pipe(context: JobContext, job_read: int, result_write: int, output_write: int) -> None:
    """A fresh job child: its job is the first and only request data this process ever holds."""
    try:
        job = marshal.loads(wire.read_sole_frame(job_read))  # written by the server, from the parent
        os.close(job_read)
        job["dir"] = context.run_dir
        if job["kind"] == "call":  # grading calls' output is not kept
            os.close(output_write)
            output_write = None
    except BaseException:
        os._exit(EXIT_SANDBOX_ERROR)
    _harden_and_run(context, job, result_write, output_write)  # never returns


def _harden_and_run(context: JobContext, job: dict, result_write: int, output_write: int | None) -> None:
    step = "files"
    try:
        os.setsid()
        null = context.null
        ruleset = context.iso.landlock_ruleset_fd if context.iso.layers["landlock"] else null
        output = null if output_write is None else output_write
        wanted = (null, output, output, result_write, ruleset)
        if min(wanted) < len(wanted):  # a source among fds 0-4: move every source above them first
            wanted = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(wanted)) for fd in wanted]
        for target, fd in enumerate(wanted):
            os.dup2(fd, target, inheritable=target < 3)
        os.closerange(len(wanted), 1 << 20)  # the zygote's channel, the parent pipe, the uid claim, ...
        context.iso.landlock_ruleset_fd = 4
        _write_files(context.iso, job)
        os.chdir(job["dir"])  # HOME, set by the zygote
        step = "rlimits"
        rlimits.apply_cpu_rlimit(context.limits)  # the others are the zygote's, inherited
        step = "ipcns"
        namespaces.enter_job_ipcns(context.iso)
        step = "uid"
        privileges.drop_privileges(context.iso, context.zygote_pid)
        step = "landlock"
        landlock.apply_landlock(context.iso)
        step = "seccomp"
        seccomp.apply_seccomp(context.iso)
        os.write(runner.RESULT_FD, SETUP_DONE)  # from here on, fd 3 carries model-reachable bytes
    except BaseException as error:
        message = json.dumps({"sandbox_error": f"{type(error).__name__}: {error}", "step": step})
        try:
            os.write(runner.RESULT_FD, SETUP_FAILED + message.encode())
        finally:
            os._exit(EXIT_SANDBOX_ERROR)
    try:
        runner.run(job, context.stdlib_path, context.streams)
    finally:
        os._exit(EXIT_SANDBOX_ERROR)


def _write_files(iso: Isolation, job: dict) -> None:
    owner = iso.uid if iso.layers["uid"] else None
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
