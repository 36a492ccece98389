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


def _step_range(ctx, param, value):
    from nsyscomm.steps import parse_step_range

    try:
        return parse_step_range(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _op_list(ctx, param, value) -> tuple[str, ...]:
    ops = tuple(dict.fromkeys(o.strip() for part in value for o in part.split(",") if o.strip()))
    if value and not ops:
        raise click.BadParameter("expected op names, e.g. all_reduce,all_gather")
    return ops


def steps_option(f: F) -> F:
    """--steps A:B: only those training steps, for every analysis (nsyscomm.combine.select)."""
    return click.option(
        "--steps",
        callback=_step_range,
        metavar="A:B",
        help="Only training steps A to B-1 (A:, :B and a single step N also work), in every table.",
    )(f)


def ops_option(f: F) -> F:
    """--ops OP[,OP]: only those collective ops, for every analysis (DeepSpeed's prof_ops)."""
    return click.option(
        "--ops",
        "ops",
        multiple=True,
        callback=_op_list,
        metavar="OP[,OP]",
        help="Only these ops (all_reduce, all_gather, ...; comma-separated or repeated), in every table.",
    )(f)
