"""The repository's scripts/ as modules, for the tests that call their functions (scripts/ is no package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str, module_name: str | None = None):
    """scripts/<name>.py, executed as a fresh module named `module_name` (default: name)."""
    spec = importlib.util.spec_from_file_location(module_name or name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
