"""`bugfix-rl <args>` through the CLI's own main inside the test process: composition, input checks and
the command body as the console script runs them, without a fresh interpreter's imports per run."""

from __future__ import annotations

import torch


def run_cli_in_process(*args: str) -> None:
    """cli.main(args), with torch's thread count restored afterwards (a run sets its own `threads`)."""
    from bugfix_rl import cli

    threads = torch.get_num_threads()
    try:
        cli.main(list(args))
    finally:
        torch.set_num_threads(threads)
