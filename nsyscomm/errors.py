"""Errors that the CLI turns into a one-line message and exit status 2."""


class InputError(Exception):
    """Unusable input: the message names the file and the fix."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM while the extraction's workers run: a way to end like Ctrl-C, which every cleanup
    that handles Ctrl-C handles too; the command says "terminated", exit status 143 (128 + 15)."""
