"""The `uid` layer and the process's privileges: a claimed uid per worker, dropped to in each job child.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
The server claims a uid no other live sandbox worker uses (`claim_uid`, once), and kills whatever a
dead server left running as it (`kill_every_process_of`; without seccomp, also after each job); the zygote sets
no_new_privs for all its children (`set_no_new_privs`) and dies with its server (`die_with_parent`);
each job child becomes the worker's uid and dies with the server (`drop_privileges`).
"""

from __future__ import annotations

import os
import signal
import socket

from .isolation import Isolation
from .syscalls import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, check, libc, prctl

UID_BASE = 1_500_000  # far above login and container sub-uid ranges; no passwd entry needed
UID_SLOTS = 4096


def first_slot() -> int:
    """Where this server's search for a free uid starts: its parent's pid, spread over the slots (Knuth's
    multiplicative hash), so that the servers of one process take neighbouring uids and two processes'
    servers seldom meet: a uid a dead server just freed is rarely the next one another process claims."""
    return os.getppid() * 2654435761 % UID_SLOTS


def uid_lock_name(uid: int) -> str:
    """The abstract socket name whose holder owns `uid` (in the host's network namespace)."""
    return f"\0bugfix-rl-sandbox-uid-{uid}"


def claim_uid(iso: Isolation) -> None:
    """Own a uid no other live sandbox worker uses: an abstract socket name is the lock."""
    start = first_slot()
    for slot in ((start + step) % UID_SLOTS for step in range(UID_SLOTS)):
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(uid_lock_name(UID_BASE + slot))
        except OSError:
            lock.close()
            continue
        iso.uid = UID_BASE + slot
        iso.keep_fds.append(lock.detach())
        # The lock goes with a server and its zygote (which inherits it), their jobs a moment later
        # (PDEATHSIG): none of those may share the uid with this server's jobs.
        if not kill_every_process_of(iso.uid):
            raise OSError(f"could not kill the processes left running as uid {iso.uid}")
        return
    raise OSError("no free sandbox uid")


def kill_every_process_of(uid: int) -> bool:
    """SIGKILL every process running as `uid` (as root: a child that becomes `uid` and kills -1,
    which reaches that uid's processes only). True when it did (or there were none)."""
    reaper = os.fork()
    if reaper == 0:
        code = 1
        try:
            os.setresuid(uid, uid, uid)
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:  # no process of that uid
                pass
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(reaper, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def set_no_new_privs() -> None:
    """No execve can ever raise privileges again; inherited by every fork, and irreversible. seccomp
    (apply_seccomp) needs it. The zygote sets it once for all its children."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when `parent_pid` (its parent) exits; exit now if it already has."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(70)


def drop_privileges(iso: Isolation, server_pid: int) -> None:
    """Become the worker's own uid and die with the server (the zygote's no_new_privs, inherited,
    keeps it from ever regaining privileges)."""
    if iso.layers["uid"]:
        os.setgroups([])
        os.setresgid(iso.uid, iso.uid, iso.uid)
        os.setresuid(iso.uid, iso.uid, iso.uid)
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")  # after setresuid,
    if os.getppid() != server_pid:                                                          # which clears it
        os._exit(70)
