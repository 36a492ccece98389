"""Errors that the CLI turns into a one-line message and exit status 2."""


class InputError(Exception):
    """Unusable input: the message names the file and the fix."""

    exit_code = 2
