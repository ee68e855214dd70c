"""Kernel isolation layers for the fork server and its job children, via ctypes (Linux, x86_64).

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.

The server pays once for everything that can be shared by consecutive jobs (an empty network
namespace, a private mount namespace with a size-limited tmpfs for run dirs, a claimed unprivileged
uid, a prebuilt Landlock ruleset and seccomp program); each forked job child then only applies
cheap per-process steps (rlimits, setresuid, landlock_restrict_self, seccomp), all before any
model-written code runs. Layer names (`LAYERS`) are what `Sandbox.layers` reports:

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

import ctypes
import errno
import os
import platform
import resource
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field

LAYERS = ("rlimits", "netns", "tmpfs", "uid", "ipcns", "landlock", "seccomp", "seccomp_ipc")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 4096, 8192, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38

UID_BASE = 1_500_000  # far above login and container sub-uid ranges; no passwd entry needed
UID_SLOTS = 4096


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(_libc.prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def _syscall(number: int, *args: int) -> int:
    """Raw syscall; every argument widened to a full register (the libc wrapper is variadic)."""
    return _libc.syscall(ctypes.c_long(number), *[ctypes.c_long(arg) for arg in args])


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)),
           f"mount {target}")


# ---------------------------------------------------------------- server-side, once per worker

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


def setup_server(scratch_mb: int) -> Isolation:
    """Enter this process's own namespaces and prepare every layer this machine allows."""
    readable = [p for p in dict.fromkeys(os.path.realpath(p) for p in sys.path) if os.path.isdir(p)]
    iso = Isolation({name: False for name in LAYERS}, {}, scratch="", readable_dirs=readable)
    iso.layers["rlimits"] = True
    root = os.geteuid() == 0
    if root:
        _try(iso, "uid", lambda: _claim_uid(iso))  # before unshare: the claim lives in the host netns
        _try(iso, "netns", _enter_empty_netns)
        _try(iso, "ipcns", lambda: _enter_private_ipcns(iso))
        _try(iso, "tmpfs", lambda: _enter_private_tmpfs(iso, scratch_mb))
        if iso.uid is not None and not iso.layers["tmpfs"]:
            iso.layers["uid"] = False
            iso.reasons["uid"] = "needs the private mount namespace to reach the stdlib"
    else:
        for name in ("uid", "netns", "tmpfs", "ipcns"):
            iso.reasons[name] = f"needs root (server runs as uid {os.geteuid()})"
    if not iso.scratch:
        iso.scratch = _make_temp_dir("bugfix-rl-sandbox-")
    _try(iso, "landlock", lambda: _build_landlock_ruleset(iso))
    _try(iso, "seccomp", lambda: _build_seccomp(iso))
    iso.layers["seccomp_ipc"] = iso.layers["seccomp"]  # one filter; the self-test proves each part
    if not iso.layers["seccomp"]:
        iso.reasons["seccomp_ipc"] = f"needs seccomp ({iso.reasons['seccomp']})"
    return iso


def _make_temp_dir(prefix: str) -> str:
    """tempfile.mkdtemp(prefix=prefix) in /tmp (the server's environment has no TMPDIR), without
    importing tempfile: it pulls in shutil and with it bz2, lzma and zlib, six shared libraries every
    fork of the zygote would copy the mappings of."""
    while True:
        path = f"/tmp/{prefix}{os.urandom(6).hex()}"
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def _try(iso: Isolation, name: str, step) -> None:
    try:
        step()
        iso.layers[name] = True
    except Exception as error:  # a layer this machine cannot give: recorded, never fatal here
        iso.layers[name] = False
        iso.reasons[name] = f"{type(error).__name__}: {error}"


def _claim_uid(iso: Isolation) -> None:
    """Own a uid no other live sandbox worker uses: an abstract socket name is the lock."""
    for slot in range(UID_SLOTS):
        lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lock.bind(f"\0bugfix-rl-sandbox-uid-{UID_BASE + slot}")
        except OSError:
            lock.close()
            continue
        iso.uid = UID_BASE + slot
        iso.keep_fds.append(lock.detach())
        return
    raise OSError("no free sandbox uid")


def _enter_empty_netns() -> None:
    _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")  # loopback stays down
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("127.0.0.1", 9))
        raise OSError("loopback still reachable after unshare")
    except OSError as error:
        if error.errno != errno.ENETUNREACH:
            raise
    finally:
        probe.close()


def _enter_private_ipcns(iso: Isolation) -> None:
    iso.host_ipc_namespace = os.readlink("/proc/self/ns/ipc")
    _check(_libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
    if os.readlink("/proc/self/ns/ipc") == iso.host_ipc_namespace:
        raise OSError("still in the host's IPC namespace after unshare")


def enter_job_ipcns(iso: Isolation) -> None:
    """A fresh IPC namespace for one job child (root, before dropping privileges): used where seccomp
    cannot deny IPC calls, so that whatever the job creates dies with it instead of staying in the
    server's namespace for the next job."""
    if iso.layers["ipcns"] and not iso.layers["seccomp_ipc"]:
        _check(_libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")


def _enter_private_tmpfs(iso: Isolation, scratch_mb: int) -> None:
    """Private mount namespace: stdlib reachable by any uid, /tmp a small private tmpfs."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=0755,size={scratch_mb}m,nr_inodes={64 * scratch_mb}")
    _open_up_ancestors(iso.readable_dirs)  # after /tmp: its staging dirs live and die in the private tmpfs
    iso.scratch = "/tmp"


def _open_up_ancestors(paths: list[str]) -> None:
    """Make every directory in `paths` reachable by any uid, in this mount namespace only.

    An interpreter under /root (mode 0700) is otherwise unusable once the job drops to its own uid:
    the blocking ancestor gets a world-traversable tmpfs on top, with the needed children bind-mounted
    back into it, so every path (and every already-imported module's __file__) stays the same.
    """
    for _ in range(16):
        blocked: dict[str, set[str]] = {}
        for path in paths:
            parts = [part for part in path.split("/") if part]
            for depth, child in enumerate(parts):
                ancestor = "/" + "/".join(parts[:depth])
                if not os.stat(ancestor).st_mode & 0o001:
                    blocked.setdefault(ancestor, set()).add(child)
                    break
        if not blocked:
            return
        ancestor = min(blocked, key=len)
        _overlay_directory(ancestor, sorted(blocked[ancestor]))
    raise OSError("could not make the stdlib reachable")


def _overlay_directory(ancestor: str, children: list[str]) -> None:
    stages = {}
    try:
        for child in children:
            stages[child] = _make_temp_dir("bugfix-rl-stage-")
            _mount(os.path.join(ancestor, child), stages[child], None, MS_BIND | MS_REC)
        _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for child, stage in stages.items():
            target = os.path.join(ancestor, child)
            os.mkdir(target)
            _mount(stage, target, None, MS_MOVE)
    finally:
        for stage in stages.values():
            _libc.umount2(stage.encode(), 2)  # MNT_DETACH; fails harmlessly once moved
            os.rmdir(stage)


# ---- Landlock (uapi: include/uapi/linux/landlock.h)

class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
# Shared libraries that stdlib extension modules link against (sqlite3, ssl, bz2, ...) and the
# loader's cache: readable as files (not listable); /dev/null readable and writable.
_LIBRARY_PATHS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")


def landlock_abi() -> int:
    return _syscall(_SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION


def _build_landlock_ruleset(iso: Isolation) -> None:
    abi = landlock_abi()
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock not supported by this kernel")
    fs_bits = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}.get(abi, 16)  # REFER (2), TRUNCATE (3), IOCTL_DEV (5)
    attr = _RulesetAttr((1 << fs_bits) - 1, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _check(_syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.addressof(attr), size, 0),
                     "landlock_create_ruleset")
    rules = [(iso.scratch, attr.handled_access_fs & ~_LL_EXECUTE)]
    rules += [(path, _LL_READ_FILE | _LL_READ_DIR) for path in iso.readable_dirs]
    libraries = dict.fromkeys(os.path.realpath(path) for path in _LIBRARY_PATHS if os.path.exists(path))
    rules += [(path, _LL_READ_FILE) for path in libraries]
    rules += [(os.devnull, _LL_READ_FILE | _LL_WRITE_FILE)]
    for path, access in rules:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneathAttr(access, fd)
            _check(_syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.addressof(rule), 0),
                   f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    iso.landlock_ruleset_fd = ruleset
    if abi < 4:
        iso.reasons["landlock"] = f"ABI {abi}: files only (TCP rules need ABI 4)"


# ---- seccomp BPF (uapi: linux/filter.h, linux/seccomp.h), x86_64 syscall numbers

_AUDIT_ARCH_X86_64 = 0xC000003E
_RET_KILL_PROCESS, _RET_ALLOW = 0x80000000, 0x7FFF0000
_LD_W_ABS, _JEQ_K, _JGT_K, _JGE_K, _RET_K = 0x20, 0x15, 0x25, 0x35, 0x06
_SYSCALL = dict(
    socket=41, clone=56, fork=57, vfork=58, execve=59, ptrace=101, syslog=103, mknod=133,
    personality=135, pivot_root=155, prctl=157, acct=163, mount=165, umount2=166, swapon=167,
    swapoff=168, reboot=169, iopl=172, ioperm=173, init_module=175, delete_module=176, quotactl=179,
    kexec_load=246, add_key=248, request_key=249, keyctl=250, mknodat=259, unshare=272,
    perf_event_open=298, name_to_handle_at=303, open_by_handle_at=304, setns=308,
    process_vm_readv=310, process_vm_writev=311, finit_module=313, kexec_file_load=320, bpf=321,
    execveat=322, userfaultfd=323, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
    open_tree=428, move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, clone3=435,
    pidfd_getfd=438, mount_setattr=442,
    # system-wide counters a job could both change and read, a covert channel between concurrent
    # jobs: free memory, load and process count (sysinfo), free blocks of a shared filesystem
    # (statfs, fstatfs, ustat), page-cache residency of the shared stdlib files (mincore, preadv2's
    # RWF_NOWAIT) and eviction or prefetch of those pages (fadvise64, readahead)
    mincore=27, sysinfo=99, ustat=136, statfs=137, fstatfs=138, readahead=187, fadvise64=221,
    preadv2=327, pwritev2=328,
)
_DENIED = [name for name in _SYSCALL if name not in ("prctl", "clone3")]
# SysV IPC and POSIX message queues, as inclusive ranges of syscall numbers: shmget..shmctl,
# semget..msgctl (semget, semop, semctl, shmdt, msgget, msgsnd, msgrcv, msgctl), semtimedop,
# mq_open..mq_getsetattr. Ranges keep the filter short: every allowed syscall walks all of it.
IPC_SYSCALL_RANGES = ((29, 31), (64, 71), (220, 220), (240, 245))


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _errno(code: int) -> int:
    return 0x00050000 | code  # SECCOMP_RET_ERRNO


def seccomp_instructions() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples; offsets: nr at 0, arch at 4, args[0] at 16.

    Every number denied with EPERM (the names above and the IPC ranges) is checked as part of a
    merged run of consecutive numbers (one JEQ for a lone number, JGE + JGT for a run) that jumps to
    one shared `return EPERM`: 62 instructions where one pair per name took 142. The kernel compiles
    the program for every job child that installs it, in time that grows with its length (~250 us at
    142 instructions, ~160 us at 41 on this project's AMD EPYC)."""
    kill, allow, eperm = (_RET_K, 0, 0, _RET_KILL_PROCESS), (_RET_K, 0, 0, _RET_ALLOW), _errno(errno.EPERM)
    head = [(_LD_W_ABS, 0, 0, 4), (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64), kill,
            (_LD_W_ABS, 0, 0, 0), (_JGE_K, 0, 1, 0x40000000), kill]
    denied = sorted({_SYSCALL[name] for name in _DENIED}
                    | {number for first, last in IPC_SYSCALL_RANGES for number in range(first, last + 1)})
    runs: list[list[int]] = []
    for number in denied:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    checks: list[tuple] = []  # "EPERM" marks a jump to the shared return
    for first, last in runs:
        if first == last:
            checks.append((_JEQ_K, "EPERM", 0, first))
        else:  # nr >= first and not nr > last -> EPERM
            checks += [(_JGE_K, 0, 1, first), (_JGT_K, 0, "EPERM", last)]
    tail = [(_JEQ_K, 0, 1, _SYSCALL["clone3"]), (_RET_K, 0, 0, _errno(errno.ENOSYS)),  # glibc falls back to clone
            (_JEQ_K, 0, 4, _SYSCALL["prctl"]), (_LD_W_ABS, 0, 0, 16),
            (_JEQ_K, 0, 1, PR_SET_PDEATHSIG), (_RET_K, 0, 0, eperm), allow,
            allow, (_RET_K, 0, 0, eperm)]
    program = head + checks + tail
    shared = len(program) - 1
    return [(code, *(shared - at - 1 if jump == "EPERM" else jump for jump in (jt, jf)), k)
            for at, (code, jt, jf, k) in enumerate(program)]


def _build_seccomp(iso: Isolation) -> None:
    if platform.machine() != "x86_64" or struct.calcsize("P") != 8:
        raise OSError(f"seccomp filter written for x86_64 only, not {platform.machine()}")
    if not os.path.exists("/proc/sys/kernel/seccomp/actions_avail"):
        raise OSError("kernel without seccomp filters")
    instructions = seccomp_instructions()
    array = (_SockFilter * len(instructions))(*[_SockFilter(*ins) for ins in instructions])
    iso.seccomp_program = _SockFprog(len(instructions), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    iso.seccomp_program._array = array  # keep the buffer alive


# ---------------------------------------------------------------- job child, before model code

@dataclass(frozen=True)
class Limits:
    """Per-job resource limits (see SandboxConfig for meanings)."""

    cpu_s: int
    memory_mb: int
    file_mb: int
    nproc: int


def apply_rlimits(limits: Limits) -> None:
    """All of a job's limits on this process."""
    apply_shared_rlimits(limits)
    apply_cpu_rlimit(limits)


def apply_shared_rlimits(limits: Limits) -> None:
    """Every limit but CPU time, for the zygote to hand down to each job child by fork. (The zygote
    itself stays within them: it holds a few fds and maps far less than `memory_mb`; as root it is
    exempt from RLIMIT_NPROC, which binds each child once it has dropped to its uid.)"""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversized writes fail with EFBIG, visibly
    for which, value in ((resource.RLIMIT_AS, (limits.memory_mb << 20,) * 2),
                         (resource.RLIMIT_FSIZE, (limits.file_mb << 20,) * 2),
                         (resource.RLIMIT_NPROC, (limits.nproc,) * 2),
                         (resource.RLIMIT_NOFILE, (64, 64)),
                         (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(which, value)


def apply_cpu_rlimit(limits: Limits) -> None:
    """RLIMIT_CPU, set by each job child itself: a fork starts with no CPU time used, the zygote's adds up."""
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))


def trim_heap() -> None:
    """Give free malloc memory back to the kernel (glibc's malloc_trim); a no-op elsewhere."""
    try:
        _libc.malloc_trim(0)
    except AttributeError:  # not glibc
        pass


def set_no_new_privs() -> None:
    """No execve can ever raise privileges again; inherited by every fork, and irreversible. seccomp
    (apply_seccomp) needs it. The zygote sets it once for all its children."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when `parent_pid` (its parent) exits; exit now if it already has."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(70)


def drop_privileges(iso: Isolation, server_pid: int) -> None:
    """Become the worker's own uid and die with the server (the zygote's no_new_privs, inherited,
    keeps it from ever regaining privileges)."""
    if iso.layers["uid"]:
        os.setgroups([])
        os.setresgid(iso.uid, iso.uid, iso.uid)
        os.setresuid(iso.uid, iso.uid, iso.uid)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")  # after setresuid,
    if os.getppid() != server_pid:                                                           # which clears it
        os._exit(70)


def apply_landlock(iso: Isolation) -> None:
    """Irreversible; `iso.landlock_ruleset_fd` is the child's copy of the server's ruleset."""
    if iso.layers["landlock"]:
        _check(_syscall(_SYS_LANDLOCK_RESTRICT_SELF, iso.landlock_ruleset_fd, 0), "landlock_restrict_self")
    os.close(iso.landlock_ruleset_fd)


def apply_seccomp(iso: Isolation) -> None:
    """Irreversible; needs no_new_privs (set by the zygote: set_no_new_privs)."""
    if iso.layers["seccomp"]:
        _prctl(PR_SET_SECCOMP, 2, ctypes.addressof(iso.seccomp_program))  # SECCOMP_MODE_FILTER
