"""Exceptions shared by the commands and the CLI that prints them."""


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit code 2."""
