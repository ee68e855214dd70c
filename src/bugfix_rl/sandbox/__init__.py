"""Sandbox for model-written code: warm fork servers forking hardened children (see docs/SANDBOX.md)."""

from .grading import GradeResult, grade, grade_many
from .isolation import LAYERS
from .results import CallResult, Outcome, RunResult
from .sandbox import Sandbox, parse_command
from .settings import SandboxConfig, SandboxUnavailable

__all__ = ["LAYERS", "CallResult", "GradeResult", "Outcome", "RunResult", "Sandbox", "SandboxConfig",
           "SandboxUnavailable", "grade", "grade_many", "parse_command"]
