"""``nsyscomm summarize``: reports in, the summary out (the analyses are nsyscomm.api.load's)."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from nsyscomm.commands import collector_paused, console, guard, interrupted_exit
from nsyscomm.commands.options import (
    debug_option,
    format_option,
    inputs_argument,
    merge_option,
    ops_option,
    steps_option,
)

if TYPE_CHECKING:  # hints only: the CLI starts without pandas and DuckDB (benchmarks/bench_startup.py)
    from nsyscomm.analyses.result import Result


# Report text is shown with its control characters visible (views/safe.py): a report's strings
# must never drive the terminal. JSON escapes them itself. Each view is imported when it is used.


def _text(result: Result, units: str, by_caller: bool) -> None:
    from nsyscomm.views.text import render

    render(result, console(), units, by_caller)


def _markdown(result: Result, units: str, by_caller: bool) -> None:
    from nsyscomm.views.safe import visible
    from nsyscomm.views.tables import markdown

    click.echo(visible(markdown(result, units, by_caller)), nl=False)


def _csv(result: Result, units: str, by_caller: bool) -> None:
    from nsyscomm.views.safe import visible_line
    from nsyscomm.views.tables import csv

    click.echo(csv(result, by_caller), nl=False)
    for w in result.warnings:  # CSV has no place for them: stderr, like the other formats' notes
        click.echo(f"nsyscomm: warning: {visible_line(w)}", err=True)


def _json(result: Result, units: str, by_caller: bool) -> None:
    from nsyscomm.views.json_out import dumps

    click.echo(dumps(result, by_caller))


# the summary's formats, one view each: `--format` of summarize and run offers these
VIEWS: dict[str, Callable[[Result, str, bool], None]] = {
    "text": _text,
    "markdown": _markdown,
    "csv": _csv,
    "json": _json,
}


def emit(result: Result, fmt: str, units: str, by_caller: bool) -> None:
    VIEWS[fmt](result, units, by_caller)


@click.command("summarize")
@inputs_argument
@click.option(
    "--by",
    "by",
    type=click.Choice(["op", "caller"]),
    default="op",
    show_default=True,
    help="caller: split each op by the call site (DeepSpeed's debug view).",
)
@format_option(tuple(VIEWS))
@click.option(
    "--units",
    type=click.Choice(["GBps", "Gbps"]),
    default="GBps",
    show_default=True,
    help="Bandwidth unit of the text/markdown tables: GBps (GB/s, as JSON, CSV and HTML have it) "
    "or Gbps (gigabits per second, DeepSpeed's).",
)
@click.option(
    "--nccl-log",
    "nccl_logs",
    multiple=True,
    type=click.Path(path_type=str),
    help="NCCL_DEBUG=INFO log or nccl-tests output: NCCL context and a reference busbw curve (repeatable).",
)
@click.option(
    "--include-env",
    is_flag=True,
    help="Also output the profiled environment and command lines the reports hold (may contain secrets).",
)
@steps_option
@ops_option
@merge_option
@click.option("--no-cache", is_flag=True, help="Extract every report again; neither read nor write the cache.")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Reports extracted in parallel (default: the usable cores).",
)
@click.option(
    "--dask",
    "dask_address",
    metavar="ADDRESS",
    default=None,
    help="Extract on a running Dask cluster (scheduler address, e.g. tcp://host:8786), or on one "
    "started for the run: local.",
)
@click.option(
    "--memory-limit",
    metavar="SIZE",
    default=None,
    help="Memory of each process's DuckDB (e.g. 4GB, 50%); past it, it spills to "
    "NSYSCOMM_TEMP_DIR (default: the system's temporary folder). Also NSYSCOMM_MEMORY_LIMIT.",
)
@debug_option
def summarize(
    inputs: tuple[str, ...],
    by: str,
    fmt: str,
    units: str,
    nccl_logs: tuple[str, ...],
    include_env: bool,
    steps: tuple[int | None, int | None] | None,
    ops: tuple[str, ...],
    merge: bool,
    no_cache: bool,
    jobs: int | None,
    dask_address: str | None,
    memory_limit: str | None,
    debug: bool,
) -> None:
    """Summarize collectives in nsys reports (SQLite or Arrow exports, as `nsyscomm run` writes them),
    PyTorch profiler traces and Flight Recorder dumps: files, folders of per-rank reports, or globs.

    With no INPUTS, the bundled sample reports are summarized."""
    started = False
    try:
        # Ctrl-C held back while DuckDB loads and the head start begins (DuckDB turns a Ctrl-C
        # during its own work into a RuntimeError, a C extension's import cut by it into an
        # ImportError), then while the rest is imported beside the reading
        with _interrupt_after():
            from nsyscomm import duck

            guard(duck.check_task_room, debug)  # before the imports, which start threads
            started = len(inputs) == 1 and not dask_address and _head_start(inputs[0], memory_limit, cache=not no_cache)
            with collector_paused():
                from nsyscomm.api import load, sample_jobs
                from nsyscomm.extract import pool  # noqa: F401 - load() imports it: here, with the rest

        scale_opts: dict[str, Any] = {
            "jobs": jobs,
            "cache": not no_cache,
            "dask": dask_address,
            "memory_limit": memory_limit,
            "merge": merge,
            "steps": steps,
            "ops": ops,
        }
        if inputs:
            guard(lambda: _finish_interrupted_runs(inputs), debug)
            result = guard(lambda: load(list(inputs), nccl_logs=nccl_logs, **scale_opts), debug)
            if include_env:
                from nsyscomm.api import environment
                from nsyscomm.views.env_out import emit_with_env

                envs = guard(lambda: environment(list(inputs)), debug)
                guard(lambda: emit_with_env(result, envs, fmt, units, by == "caller", emit), debug)
                return
            guard(functools.partial(emit, result, fmt, units, by == "caller"), debug)
            return
        # no input: a tour of the bundled synthetic samples, each its own job
        samples = sample_jobs()
        if fmt in ("json", "csv"):
            samples = samples[:1]
            click.echo(f"nsyscomm: no input given: showing the bundled sample {samples[0].name}", err=True)
        for job in samples:
            if fmt in ("text", "markdown"):
                click.echo(f"\n=== sample job: {job.name} (synthetic, made by nsyscomm.synth) ===\n")
            result = guard(functools.partial(load, [job], nccl_logs=nccl_logs, **scale_opts), debug)
            guard(functools.partial(emit, result, fmt, units, by == "caller"), debug)
    except KeyboardInterrupt as e:  # during the imports, before any guard: the same line and status
        interrupted_exit(e)
    finally:
        if started:  # whatever ended the run: an untaken head start is stopped and closed
            from nsyscomm.ingest.nsys.reader import drop_head_starts

            drop_head_starts()


def _finish_interrupted_runs(inputs: tuple[str, ...]) -> None:
    """A run folder whose capture nsys wrote after the run was stopped (killed, hung up) gets the
    import and export the run did not live to do, so that it reads as any other."""
    from pathlib import Path

    from nsyscomm.capture import post
    from nsyscomm.capture.exports import DEFAULT_EXPORT

    for name in inputs:
        if Path(name).is_dir():
            post.finish_unimported(Path(name), DEFAULT_EXPORT)


@contextlib.contextmanager
def _interrupt_after():
    """Ctrl-C held back until the block has run, then raised. For the imports that run beside a
    head start's reading: a KeyboardInterrupt in the middle of an import can leave Python's import
    lock held (the signal can land between the lock's acquire and the try that releases it): the
    reading thread, whose own imports (pyarrow's, by DuckDB) then wait for it forever, and the
    command hangs. And for DuckDB's own work on this thread: with Python's handler in place, DuckDB
    takes the signal and raises a RuntimeError of its own instead. Signal handlers belong to the
    main thread: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield  # (a caller that ignores Ctrl-C, nohup's, is not overruled)
        return
    hit = []
    previous = signal.signal(signal.SIGINT, lambda *_: hit.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit:
        raise KeyboardInterrupt


def _head_start(path: str, memory_limit: str | None, cache: bool) -> bool:
    """A lone nsys report is read into DuckDB while pandas and the rest of nsyscomm are imported
    (nsyscomm.ingest.nsys.reader.head_start), so the two waits overlap instead of adding up."""
    from pathlib import Path

    from nsyscomm import duck
    from nsyscomm.extract import cache as report_cache
    from nsyscomm.ingest.nsys import reader as nsys_reader

    p = Path(path)
    try:
        if not p.is_file() or not nsys_reader.is_sqlite(p) or (cache and report_cache.has(p, p.name)):
            return False
        with duck.memory_limit(memory_limit), duck.small_input([p]):
            nsys_reader.head_start(p)
        return True
    except Exception as e:  # noqa: BLE001 - only a head start: the ordinary path reports any problem
        if duck.interrupted(e):  # but Ctrl-C, which DuckDB reports as an error of its own
            raise KeyboardInterrupt from None
        return False
