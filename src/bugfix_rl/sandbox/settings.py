"""What a caller asks of a sandbox (`SandboxConfig`: limits, required layers, workers), and the refusal
when this machine cannot give it (`SandboxUnavailable`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bugfix_rl.config import SandboxLimits

from .isolation import LAYERS


class SandboxUnavailable(RuntimeError):
    """A layer named in `min_isolation` cannot be had on this machine (or a server failed to start)."""


_DEFAULTS = SandboxLimits()  # the defaults are the config schema's (`env.sandbox.*`), written once there


@dataclass(frozen=True)
class SandboxConfig:
    timeout_s: float = _DEFAULTS.timeout_s
    """Wall-clock limit per job (a test run or a grading call batch); the job is killed past it."""
    cpu_s: int = _DEFAULTS.cpu_s
    """RLIMIT_CPU of the job process, in seconds."""
    memory_mb: int = _DEFAULTS.memory_mb
    """RLIMIT_AS (address space) of the job process, in MiB."""
    file_mb: int = _DEFAULTS.file_mb
    """RLIMIT_FSIZE: the largest file the job may write, in MiB."""
    nproc: int = _DEFAULTS.nproc
    """RLIMIT_NPROC for the job's uid (processes + threads; seccomp forbids both anyway)."""
    min_isolation: tuple[str, ...] = tuple(_DEFAULTS.min_isolation)
    """Layers that must be active, else the constructor raises SandboxUnavailable; see LAYERS."""
    workers: int = _DEFAULTS.workers
    """Fork servers, i.e. jobs run in parallel (one per core is right for grading)."""

    @classmethod
    def from_limits(cls, limits: SandboxLimits) -> SandboxConfig:
        """The sandbox of a run's `env.sandbox` settings."""
        return cls(**{**asdict(limits), "min_isolation": tuple(limits.min_isolation)})

    def __post_init__(self):
        object.__setattr__(self, "min_isolation", tuple(self.min_isolation))
        unknown = [name for name in self.min_isolation if name not in LAYERS]
        if unknown:
            raise ValueError(f"min_isolation: unknown layer {unknown[0]!r}; valid: {', '.join(LAYERS)}")
        for name in ("timeout_s", "cpu_s", "memory_mb", "file_mb", "nproc", "workers"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")

    @property
    def scratch_mb(self) -> int:
        """Size of each worker's private tmpfs for run dirs: room for 16 maximal files."""
        return 16 * self.file_mb
