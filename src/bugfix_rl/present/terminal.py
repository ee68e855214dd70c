"""The console every command prints its results through (rich).

On a terminal rich fits tables and text to its width. Piped or redirected, rich assumes 80 columns
and cut report tables to "0.2…" (issue 38; only an undocumented COLUMNS=200 helped): there it gets
PIPE_COLUMNS, so nothing is cut or wrapped and a pager or editor wraps as it likes. COLUMNS, when set,
still wins (rich reads it).
"""

from __future__ import annotations

import os

from rich.console import Console

PIPE_COLUMNS = 1000


def output_console(stderr: bool = False) -> Console:
    """A rich Console on stdout (stderr=True: stderr), as wide as the terminal, or PIPE_COLUMNS when not one."""
    console = Console(highlight=False, stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, stderr=stderr, width=PIPE_COLUMNS)
    return console
