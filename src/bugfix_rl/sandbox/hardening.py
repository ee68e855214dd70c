"""The isolation layers a fork server sets up once (`setup_server`), and where each layer lives.

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.

The server pays once for everything that can be shared by consecutive jobs (an empty network
namespace, a private mount namespace with a size-limited tmpfs for run dirs, a claimed unprivileged
uid, a prebuilt Landlock ruleset and seccomp program); each forked job child then only applies
cheap per-process steps (rlimits, setresuid, landlock_restrict_self, seccomp), all before any
model-written code runs. The layers (`isolation.LAYERS`, described there) are built by one module
each, all through ctypes (`syscalls`, Linux, x86_64):

- rlimits.py:    `rlimits` (the zygote's shared limits, each child's CPU limit).
- namespaces.py: `netns`, `ipcns`, `tmpfs` (the server's namespaces; a job's own IPC namespace).
- privileges.py: `uid` (claimed here, dropped to by each child), no_new_privs, parent-death signals.
- landlock.py:   `landlock` (ruleset built here, applied by each child).
- seccomp.py:    `seccomp`, `seccomp_ipc` (filter built here, installed by each child).

A layer this machine cannot give is recorded as off with a one-line reason, never fatal here: the
self-test (server.Server.prove_layers) and the parent's `min_isolation` decide what that means.
"""

from __future__ import annotations

import os
import sys

from . import landlock, namespaces, privileges, seccomp
from .isolation import LAYERS, Isolation


def setup_server(scratch_mb: int) -> Isolation:
    """Enter this process's own namespaces and prepare every layer this machine allows."""
    readable = [p for p in dict.fromkeys(os.path.realpath(p) for p in sys.path) if os.path.isdir(p)]
    iso = Isolation({name: False for name in LAYERS}, {}, scratch="", readable_dirs=readable)
    iso.layers["rlimits"] = True
    root = os.geteuid() == 0
    if root:
        _try(iso, "uid", lambda: privileges.claim_uid(iso))  # before unshare: the claim lives in the host netns
        _try(iso, "netns", namespaces.enter_empty_netns)
        _try(iso, "ipcns", lambda: namespaces.enter_private_ipcns(iso))
        _try(iso, "tmpfs", lambda: namespaces.enter_private_tmpfs(iso, scratch_mb))
        if iso.uid is not None and not iso.layers["tmpfs"]:
            iso.layers["uid"] = False
            iso.reasons["uid"] = "needs the private mount namespace to reach the stdlib"
    else:
        for name in ("uid", "netns", "tmpfs", "ipcns"):
            iso.reasons[name] = f"needs root (server runs as uid {os.geteuid()})"
    if not iso.scratch:
        iso.scratch = namespaces.make_temp_dir("bugfix-rl-sandbox-")
    _try(iso, "landlock", lambda: landlock.build_landlock_ruleset(iso))
    _try(iso, "seccomp", lambda: seccomp.build_seccomp(iso))
    iso.layers["seccomp_ipc"] = iso.layers["seccomp"]  # one filter; the self-test proves each part
    if not iso.layers["seccomp"]:
        iso.reasons["seccomp_ipc"] = f"needs seccomp ({iso.reasons['seccomp']})"
    return iso


def _try(iso: Isolation, name: str, step) -> None:
    try:
        step()
        iso.layers[name] = True
    except Exception as error:  # a layer this machine cannot give: recorded, never fatal here
        iso.layers[name] = False
        iso.reasons[name] = f"{type(error).__name__}: {error}"
