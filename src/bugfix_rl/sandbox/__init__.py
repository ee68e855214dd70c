"""Sandbox for model-written code: warm fork servers forking hardened children (see docs/SANDBOX.md)."""

from .hardening import LAYERS
from .sandbox import (
    CallResult,
    GradeResult,
    Outcome,
    RunResult,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    grade,
    grade_many,
    parse_command,
)

__all__ = ["LAYERS", "CallResult", "GradeResult", "Outcome", "RunResult", "Sandbox", "SandboxConfig",
           "SandboxUnavailable", "grade", "grade_many", "parse_command"]
