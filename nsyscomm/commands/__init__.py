"""Click commands beyond summarize/run, and what every command shares: one error contract.

Exit status: 0 success, 1 regression (gate only), 2 unusable input or bad options (one line
naming the file and the fix; also running out of memory, with --memory-limit as the fix), 3 an
internal error of nsyscomm's (never confused with the others), 130 interrupted, 143 terminated
(SIGTERM while extracting).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from nsyscomm import resources
from nsyscomm.errors import InputError, Terminated

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


# what a summary imports after the report is read: the readers of every format, its analyses,
# views and the combining stage (whole packages, so that a module added to them is covered), and
# the extra modules they load
SUMMARY_PACKAGES = ("nsyscomm.ingest", "nsyscomm.combine", "nsyscomm.analyses", "nsyscomm.views")
SUMMARY_MODULES = (
    "nsyscomm.bundled",
    "nsyscomm.extract.cache",
    "nsyscomm.extract.pool",
    "nsyscomm.ingest.nsys._sqlite_scan",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pandas.core.arrays.arrow.extension_types",
    "rich._emoji_codes",
)


def import_summary_stack() -> None:
    """Import what summarizing a report will import, with the collector paused: ahead of time,
    while a profiled job runs (``nsyscomm run``), so that the wait after the job holds none of
    it. A module that fails to import here is left for the summary to report."""
    import importlib
    import pkgutil

    with collector_paused():
        for name in SUMMARY_PACKAGES:
            try:
                pkg = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - reported by the summary itself
                continue
            for info in pkgutil.walk_packages(pkg.__path__, f"{name}."):
                with contextlib.suppress(Exception):
                    importlib.import_module(info.name)
        for name in SUMMARY_MODULES:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


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
        _out_of_tasks(e)
        _out_of_files(e)
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"nsyscomm: error: {where}{e.strerror or e}", err=True)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt as e:
        interrupted_exit(e)
    except Exception as e:  # a bug of ours, unless memory ran out or Ctrl-C stopped DuckDB
        if debug:
            _traceback()
        from nsyscomm.duck import interrupted  # imported once something failed: duckdb is loaded by then

        _out_of_tasks(e)
        if interrupted(e):
            click.echo("nsyscomm: interrupted", err=True)
            sys.exit(130)
        _out_of_files(e)
        if resources.out_of_memory(e):  # MemoryError, DuckDB's, or a library that could not be mapped
            click.echo(f"nsyscomm: error: out of memory ({_first_line(e)}); {resources.memory_fix()}", err=True)
            sys.exit(EXIT_INPUT)
        click.echo(
            f"nsyscomm: internal error: {type(e).__name__}: {_first_line(e)} "
            f"(run again with --debug for a traceback, and report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)


def _out_of_tasks(e: BaseException) -> None:
    """A thread or process that could not start under the user's limit on them (RLIMIT_NPROC):
    one line naming the limit and what to change, status 2 (the command's own setting, as a
    memory limit is)."""
    from nsyscomm import duck

    if duck.task_room() is not None and duck.out_of_tasks(e):
        click.echo(f"nsyscomm: error: {duck.task_limit_message()}", err=True)
        sys.exit(EXIT_INPUT)


def _out_of_files(e: BaseException) -> None:
    """The limit on open files reached (``ulimit -n``): one line naming it and the fix, status 2."""
    why = resources.out_of_files(e)
    if why:
        click.echo(f"nsyscomm: error: {why}", err=True)
        sys.exit(EXIT_INPUT)


def interrupted_exit(e: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C: "interrupted", status 130; SIGTERM (Terminated): "terminated", 143 (128 + 15)."""
    if isinstance(e, Terminated):
        click.echo("nsyscomm: terminated", err=True)
        sys.exit(143)
    click.echo("nsyscomm: interrupted", err=True)
    sys.exit(130)


def console() -> SafeConsole:
    """The console every text view prints on: report text with its control characters shown,
    never executed by the terminal. Lines of text are never broken by it (soft_wrap):
    a command it suggests stays one line to copy, in a terminal as in a log."""
    from nsyscomm.views.safe import SafeConsole as Console

    c = Console(highlight=False, soft_wrap=True)
    if not c.is_terminal:  # CI logs and files: wide tables instead of rich's 80 columns
        c = Console(highlight=False, soft_wrap=True, width=200)
    return c
