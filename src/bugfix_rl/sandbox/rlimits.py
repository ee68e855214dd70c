"""The `rlimits` layer: a job's resource limits, set by the zygote (all but CPU) and by each job child (CPU).

Stdlib only: imported by the fork server, which runs under `python -I -S -B` with no site-packages.
"""

from __future__ import annotations

import resource
import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Per-job resource limits (see SandboxConfig for meanings)."""

    cpu_s: int
    memory_mb: int
    file_mb: int
    nproc: int


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
