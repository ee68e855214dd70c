"""The libc functions and raw syscalls the isolation layers call, via ctypes (Linux, x86_64).

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
A call that fails raises OSError with the errno's text (`check`); nothing here decides policy: the
layer modules (namespaces, privileges, landlock, seccomp) say what to call and when.
"""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38  # prctl options


def check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    check(libc.prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def raw_syscall(number: int, *args: int) -> int:
    """Raw syscall; every argument widened to a full register (the libc wrapper is variadic)."""
    return libc.syscall(ctypes.c_long(number), *[ctypes.c_long(arg) for arg in args])


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    check(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)),
          f"mount {target}")


def trim_heap() -> None:
    """Give free malloc memory back to the kernel (glibc's malloc_trim); a no-op elsewhere."""
    try:
        libc.malloc_trim(0)
    except AttributeError:  # not glibc
        pass
