"""The sandbox the tests share: a real one, or a skip that names why this machine has none."""

from __future__ import annotations

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
