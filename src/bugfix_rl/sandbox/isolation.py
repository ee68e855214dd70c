"""The isolation layers' names and the record of what one fork server set up (`Isolation`).

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages,
and by the trainer's config check. Layer names (`LAYERS`) are what `Sandbox.layers` reports:

- rlimits:  CPU seconds, address space, file size, process count, open files, no core dumps.
- netns:    the server's own network namespace with no interface up: no IP traffic at all.
- tmpfs:    private mount namespace; run dirs live on a small tmpfs the host never sees.
- uid:      each worker runs jobs as its own unprivileged uid: no capabilities, RLIMIT_NPROC
            enforced (it is not for root), root-only files unreadable, no signals to other users.
- ipcns:    the server's own IPC namespace: SysV shared memory, semaphores, message queues and
            POSIX message queues of the host, other workers and other trainers are out of reach
            (and, where seccomp_ipc is off, each job gets a fresh one that dies with it).
- landlock: file access limited to the run dir (read/write) and the stdlib (read); no TCP
            bind/connect (ABI >= 4); no signals or abstract sockets outside the job (ABI >= 6).
- seccomp:  no socket() at all (socketpair() only: no IP, no host Unix sockets); no fork/clone/exec
            (so nothing can outlive the job); no ptrace, mount, namespaces, bpf, io_uring,
            keyrings, module loading or parent-death changes; no system-wide counters (sysinfo,
            statfs) or page-cache probes (mincore, fadvise, readahead, preadv2) that concurrent
            jobs could use as a covert channel.
- seccomp_ipc: the same filter denies SysV IPC (shmget/shmat/..., semget/semop/..., msgget/msgsnd/
            msgrcv/...) and POSIX message queues (mq_open, ...): a job cannot create an IPC object,
            so none can carry answers between episodes or outlive the job. Listed apart from
            `seccomp` because the self-test proves it apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAYERS = ("rlimits", "netns", "tmpfs", "uid", "ipcns", "landlock", "seccomp", "seccomp_ipc")


@dataclass
class Isolation:
    """What one fork server set up, and what its job children apply to themselves.

    layers/reasons: per layer in LAYERS, whether it is active and, if not, why (one line).
    scratch: directory holding the current job's run dir (a private tmpfs when `tmpfs` is active).
    readable_dirs: stdlib directories the job may read (the server's own sys.path).
    """

    layers: dict[str, bool]
    reasons: dict[str, str]
    scratch: str
    readable_dirs: list[str]
    uid: int | None = None
    host_ipc_namespace: str = ""  # /proc/self/ns/ipc before unshare: the self-test checks the job's differs
    landlock_ruleset_fd: int | None = None
    keep_fds: list[int] = field(default_factory=list)  # uid claim socket etc.: closed in children
    seccomp_program: object = None  # ctypes sock_fprog, kept alive for the children
