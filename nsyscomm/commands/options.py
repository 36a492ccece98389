"""Options several commands share, declared once: the same flag, help text and default wherever
it appears. Each is a decorator for a click command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def debug_option(f: F) -> F:
    return click.option("--debug", is_flag=True, help="Show a traceback on errors.")(f)


def merge_option(f: F) -> F:
    return click.option(
        "--merge",
        is_flag=True,
        help="Read reports that do not look like one job (ranks or world sizes clash, runs far apart) "
        "as one job anyway.",
    )(f)


def inputs_argument(f: F) -> F:
    """Reports, folders of per-rank reports or globs; none: the bundled samples."""
    return click.argument("inputs", nargs=-1, type=click.Path(path_type=str))(f)


def format_option(choices: tuple[str, ...]) -> Callable[[F], F]:
    """--format, the first of choices the default."""

    def decorate(f: F) -> F:
        return click.option("--format", "fmt", type=click.Choice(choices), default=choices[0], show_default=True)(f)

    return decorate
