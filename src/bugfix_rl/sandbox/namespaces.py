"""The namespace layers: `netns`, `ipcns` and `tmpfs` (a private mount namespace), entered once per server.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
The server unshares each namespace before its first job (root only) and every job child inherits
them; the one per-job step is `enter_job_ipcns`, a fresh IPC namespace for a child where seccomp
cannot deny IPC calls. `make_temp_dir` is the server's scratch dir when the private tmpfs is off.
"""

from __future__ import annotations

import errno
import os
import socket

from .isolation import Isolation
from .syscalls import check, libc, mount

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 4096, 8192, 16384, 1 << 18


def make_temp_dir(prefix: str) -> str:
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


def enter_empty_netns() -> None:
    check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")  # loopback stays down
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("127.0.0.1", 9))
        raise OSError("loopback still reachable after unshare")
    except OSError as error:
        if error.errno != errno.ENETUNREACH:
            raise
    finally:
        probe.close()


def enter_private_ipcns(iso: Isolation) -> None:
    iso.host_ipc_namespace = os.readlink("/proc/self/ns/ipc")
    check(libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
    if os.readlink("/proc/self/ns/ipc") == iso.host_ipc_namespace:
        raise OSError("still in the host's IPC namespace after unshare")


def enter_job_ipcns(iso: Isolation) -> None:
    """A fresh IPC namespace for one job child (root, before dropping privileges): used where seccomp
    cannot deny IPC calls, so that whatever the job creates dies with it instead of staying in the
    server's namespace for the next job."""
    if iso.layers["ipcns"] and not iso.layers["seccomp_ipc"]:
        check(libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")


def enter_private_tmpfs(iso: Isolation, scratch_mb: int) -> None:
    """Private mount namespace: stdlib reachable by any uid, /tmp a small private tmpfs."""
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
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
            stages[child] = make_temp_dir("bugfix-rl-stage-")
            mount(os.path.join(ancestor, child), stages[child], None, MS_BIND | MS_REC)
        mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for child, stage in stages.items():
            target = os.path.join(ancestor, child)
            os.mkdir(target)
            mount(stage, target, None, MS_MOVE)
    finally:
        for stage in stages.values():
            libc.umount2(stage.encode(), 2)  # MNT_DETACH; fails harmlessly once moved
            os.rmdir(stage)
