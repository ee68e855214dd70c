"""`bugfix-rl <args>` through the CLI's own main inside the test process: composition, input checks and
the command body as the console script runs them, without a fresh interpreter's imports per run.

A fresh interpreter pays 2-6 s of imports (torch, Hydra, and transformers for a Qwen3 run) before a
command starts, which is most of a short CLI test. Tests of what only a process shows (the console
script's quick exit, signals, a terminal, import-time kernel pinning, a wheel install) keep running
`bugfix-rl` in a subprocess; the others use these helpers.
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import torch


def run_cli_in_process(*args: str) -> None:
    """cli.main(args), with torch's thread count restored afterwards (a run sets its own `threads`)."""
    from bugfix_rl import cli

    threads = torch.get_num_threads()
    try:
        cli.main(list(args))
    finally:
        torch.set_num_threads(threads)


@dataclass
class CliResult:
    """What a `bugfix-rl` process would have given: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def cli_result(*args: str, cwd: Path | str | None = None) -> CliResult:
    """cli.main(args) run in `cwd` (default: here) with stdout and stderr captured; SystemExit becomes the
    exit status the console script would give (cli.exit_status). An exception main() does not turn into
    SystemExit propagates, as its traceback would end a process. The working directory, sys.argv and
    torch's thread count are restored afterwards."""
    from bugfix_rl import cli

    out, err = io.StringIO(), io.StringIO()
    here, argv, threads = os.getcwd(), sys.argv[:], torch.get_num_threads()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                cli.main(list(args))
                code = 0
            except SystemExit as done:
                code = cli.exit_status(done.code)
    finally:
        os.chdir(here)
        sys.argv = argv
        torch.set_num_threads(threads)
    return CliResult(code, out.getvalue(), err.getvalue())
