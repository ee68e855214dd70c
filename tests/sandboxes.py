"""The sandbox the tests share: a real one, or a skip that names why this machine has none."""

from __future__ import annotations

import os

import pytest


def start_sandbox(**settings):
    """Sandbox(SandboxConfig(**settings)), a context manager; skips the test where none can start."""
    try:
        from bugfix_rl.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
    except ImportError as error:
        pytest.skip(f"sandbox package not importable: {error}")
    try:
        return Sandbox(SandboxConfig(**settings))
    except SandboxUnavailable as error:
        pytest.skip(f"sandbox unavailable on this machine: {error}")


def live_processes_of(uids) -> list[int]:
    """Pids of the live processes whose real uid is in `uids`. Zombies do not count: they are dead,
    waiting for whoever adopted them (a killed server's job is adopted by PID 1, and a container's
    PID 1 may never reap it; its uid can be claimed again by the next sandbox)."""
    wanted = {str(uid) for uid in uids}
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        if fields["Uid"].split()[0] in wanted and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found
