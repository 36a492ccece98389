"""Click commands beyond summarize/run, and what every command shares: one error contract.

Exit status: 0 success, 1 regression (gate only), 2 unusable input or bad options (one line
naming the file and the fix; also running out of memory, with --memory-limit as the fix), 3 an
internal error of nsyscomm's (never confused with the others), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

import click

from nsyscomm.errors import InputError

if TYPE_CHECKING:
    from nsyscomm.views.safe import SafeConsole

EXIT_INPUT, EXIT_INTERNAL = 2, 3
T = TypeVar("T")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's garbage collector off while a command imports the analysis stack (pandas, pyarrow,
    numpy, DuckDB), and every object alive then frozen afterwards. Those imports leave about 62k
    objects that the collector tracks, and set off collections that walk them again and again;
    every full collection later in the run would walk them once more. Modules and the command's
    own state live until the exit, so freezing them loses nothing (docs/performance.md, "The
    collector during imports")."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _first_line(e: BaseException) -> str:
    from nsyscomm.views.safe import visible_line  # messages quote report text: shown, never obeyed

    text = str(e).strip()
    return visible_line(text.splitlines()[0]) if text else type(e).__name__


def _traceback() -> None:
    import traceback  # here, not at the top: only --debug failures need it, not every start-up

    traceback.print_exc()


def guard(fn: Callable[[], T], debug: bool = False) -> T:
    """Run fn(); turn every failure into one line on stderr and the right exit status."""
    try:
        return fn()
    except InputError as e:
        if debug:
            _traceback()
        click.echo(f"nsyscomm: error: {_first_line(e)}", err=True)
        sys.exit(EXIT_INPUT)
    except OSError as e:  # unreadable input, unwritable output: the user's to fix
        if debug:
            _traceback()
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"nsyscomm: error: {where}{e.strerror or e}", err=True)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt:
        click.echo("nsyscomm: interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # a bug of ours, unless memory ran out or Ctrl-C stopped DuckDB
        if debug:
            _traceback()
        from nsyscomm.duck import interrupted  # imported once something failed: duckdb is loaded by then

        if interrupted(e):
            click.echo("nsyscomm: interrupted", err=True)
            sys.exit(130)
        if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryException":  # DuckDB's
            click.echo(
                f"nsyscomm: error: out of memory ({_first_line(e)}); "
                f"give a larger --memory-limit (NSYSCOMM_MEMORY_LIMIT), or fewer --jobs",
                err=True,
            )
            sys.exit(EXIT_INPUT)
        click.echo(
            f"nsyscomm: internal error: {type(e).__name__}: {_first_line(e)} "
            f"(run again with --debug for a traceback, and report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)


def console() -> SafeConsole:
    """The console every text view prints on: report text with its control characters shown,
    never executed by the terminal. Lines of text are never broken by it (soft_wrap):
    a command it suggests stays one line to copy, in a terminal as in a log."""
    from nsyscomm.views.safe import SafeConsole as Console

    c = Console(highlight=False, soft_wrap=True)
    if not c.is_terminal:  # CI logs and files: wide tables instead of rich's 80 columns
        c = Console(highlight=False, soft_wrap=True, width=200)
    return c
