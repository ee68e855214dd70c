"""`bugfix-rl <args>` through the CLI's own main inside the test process: composition, input checks and
the command body as the console script runs them, without a fresh interpreter's imports per run.

A fresh interpreter pays 2-6 s of imports (torch, Hydra, and transformers for a Qwen3 run) before a
command starts, which is most of a short CLI test. Tests of what only a process shows (the console
script's quick exit, signals, a terminal, import-time kernel pinning, a wheel install) keep running
`bugfix-rl` in a subprocess; the others use these helpers.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import warnings
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import torch


@contextmanager
def _process_state_kept():
    """Afterwards, what a command changes for the whole process is as it was: the working directory,
    sys.argv, torch's thread count (a run sets its own `threads`) and random state, and the root logger
    (Hydra configures logging for each run)."""
    here, argv, threads, rng = os.getcwd(), sys.argv[:], torch.get_num_threads(), torch.get_rng_state()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        os.chdir(here)
        sys.argv = argv
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
        root.handlers[:] = handlers
        root.setLevel(level)


def run_cli_in_process(*args: str) -> None:
    """cli.main(args), printing as it goes (an error propagates); the process state kept as it was."""
    from bugfix_rl import cli

    with _process_state_kept():
        cli.main(list(args))


@dataclass
class CliResult:
    """What a `bugfix-rl` process would have given: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@contextmanager
def _file_descriptor_capture():
    """Point file descriptors 1 and 2 at temporary files for the block (what C code, and the processes
    the command starts, write there); yields a function giving (stdout, stderr) of those writes."""
    files = [tempfile.TemporaryFile(mode="w+b") for _ in range(2)]
    saved = [os.dup(fd) for fd in (1, 2)]
    for fd in (1, 2):
        getattr(sys, ("stdout", "stderr")[fd - 1]).flush()
    try:
        for fd, file in zip((1, 2), files):
            os.dup2(file.fileno(), fd)

        def read() -> tuple[str, str]:
            texts = []
            for file in files:
                file.seek(0)
                texts.append(file.read().decode("utf-8", errors="replace"))
            return texts[0], texts[1]

        yield read
    finally:
        for fd, old in zip((1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        for file in files:
            file.close()


def _python_default_warning_filters() -> None:
    """The warning filters a fresh `python` starts with (not pytest's, which show deprecations): what a
    `bugfix-rl` process would print."""
    warnings.resetwarnings()
    for category in (ResourceWarning, ImportWarning, PendingDeprecationWarning, DeprecationWarning):
        warnings.simplefilter("ignore", category)  # each inserted first: the list ends as Python's
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")


def cli_result(*args: str, cwd: Path | str | None = None) -> CliResult:
    """cli.main(args) run in `cwd` (default: here), with what it prints captured as a process's output
    would be: Python's sys.stdout/sys.stderr, warnings (formatted onto stderr), and writes to file
    descriptors 1 and 2 (C code, child processes) appended after them. SystemExit becomes the exit status
    the console script would give (cli.exit_status). An exception inside a command is turned by Hydra into
    a short traceback and status 1, as in a process (Hydra re-raises it instead when HYDRA_FULL_ERROR is
    set or a tracer such as coverage runs); one raised before Hydra starts propagates. The process state
    is kept as it was (_process_state_kept)."""
    from bugfix_rl import cli

    out, err = io.StringIO(), io.StringIO()
    with _process_state_kept():
        if cwd is not None:
            os.chdir(cwd)
        with _file_descriptor_capture() as written, warnings.catch_warnings(record=True) as caught:
            _python_default_warning_filters()
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    cli.main(list(args))
                    code = 0
                except SystemExit as done:
                    code = cli.exit_status(done.code)
                for warning in caught:
                    err.write(warnings.formatwarning(warning.message, warning.category, warning.filename,
                                                     warning.lineno, warning.line))
            fd_out, fd_err = written()
    return CliResult(code, out.getvalue() + fd_out, err.getvalue() + fd_err)
