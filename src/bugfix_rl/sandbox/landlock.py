"""The `landlock` layer: a ruleset built once per server, applied by each job child to itself.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
The ruleset (uapi: include/uapi/linux/landlock.h) gives the run dir read/write, the stdlib read,
the shared libraries and the loader's cache read as files, /dev/null read/write; it denies TCP
bind/connect from ABI 4 and signals and abstract sockets outside the job from ABI 6.
"""

from __future__ import annotations

import ctypes
import os

from .isolation import Isolation
from .syscalls import check, raw_syscall


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
    return raw_syscall(_SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION


def build_landlock_ruleset(iso: Isolation) -> None:
    abi = landlock_abi()
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock not supported by this kernel")
    fs_bits = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}.get(abi, 16)  # REFER (2), TRUNCATE (3), IOCTL_DEV (5)
    attr = _RulesetAttr((1 << fs_bits) - 1, 0b11 if abi >= 4 else 0, 0b11 if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = check(raw_syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.addressof(attr), size, 0),
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
            check(raw_syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.addressof(rule), 0),
                  f"landlock_add_rule {path}")
        finally:
            os.close(fd)
    iso.landlock_ruleset_fd = ruleset
    if abi < 4:
        iso.reasons["landlock"] = f"ABI {abi}: files only (TCP rules need ABI 4)"


def apply_landlock(iso: Isolation) -> None:
    """Irreversible; `iso.landlock_ruleset_fd` is the child's copy of the server's ruleset."""
    if iso.layers["landlock"]:
        check(raw_syscall(_SYS_LANDLOCK_RESTRICT_SELF, iso.landlock_ruleset_fd, 0), "landlock_restrict_self")
    os.close(iso.landlock_ruleset_fd)
