"""The `seccomp` and `seccomp_ipc` layers: one BPF filter, built once per server, installed by each job child.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
Hand-written classic BPF (uapi: linux/filter.h, linux/seccomp.h) with x86_64 syscall numbers: it
denies with EPERM every call named in `_SYSCALL` but prctl and clone3, and the SysV IPC and POSIX
message queue ranges; clone3 gets ENOSYS (glibc falls back to clone, denied); prctl is denied only
for PR_SET_PDEATHSIG; other architectures' syscalls (i386, x32) kill the process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

from .isolation import Isolation
from .syscalls import PR_SET_PDEATHSIG, PR_SET_SECCOMP, prctl

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


def build_seccomp(iso: Isolation) -> None:
    if platform.machine() != "x86_64" or struct.calcsize("P") != 8:
        raise OSError(f"seccomp filter written for x86_64 only, not {platform.machine()}")
    if not os.path.exists("/proc/sys/kernel/seccomp/actions_avail"):
        raise OSError("kernel without seccomp filters")
    instructions = seccomp_instructions()
    array = (_SockFilter * len(instructions))(*[_SockFilter(*ins) for ins in instructions])
    iso.seccomp_program = _SockFprog(len(instructions), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    iso.seccomp_program._array = array  # keep the buffer alive


def apply_seccomp(iso: Isolation) -> None:
    """Irreversible; needs no_new_privs (set by the zygote: set_no_new_privs)."""
    if iso.layers["seccomp"]:
        prctl(PR_SET_SECCOMP, 2, ctypes.addressof(iso.seccomp_program))  # SECCOMP_MODE_FILTER
