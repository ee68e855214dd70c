"""Exceptions shared by the commands and the CLI that prints them."""


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit code 2."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable or not one of ours (one-line message). Defined here, without
    torch, so that the CLI's checks of bad input answer before torch loads (checkpoint.py re-exports it)."""


class PreflightFailed(RuntimeError):
    """A run refused to start: a preflight check failed, or the cold start found nothing to learn from
    (raised by run/training.py and recipes/cold_start.py, printed by the CLI)."""
