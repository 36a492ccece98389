"""Command line: a thin click layer over nsyscomm.api (every command is a library call)."""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.utils import make_default_short_help

from nsyscomm import __version__
from nsyscomm.commands import collector_paused, console
from nsyscomm.commands import guard as _run_guarded

if TYPE_CHECKING:  # hints only: the CLI starts without pandas and DuckDB (benchmarks/bench_startup.py)
    from nsyscomm.analyses.result import Result

FORMATS = ("text", "markdown", "csv", "json")


def emit(result: Result, fmt: str, units: str, by_caller: bool) -> None:
    # report text is shown with its control characters visible (views/safe.py, issue 26); JSON
    # escapes them itself
    from nsyscomm.views.safe import visible, visible_line

    if fmt == "json":
        from nsyscomm.views.json_out import dumps

        click.echo(dumps(result, by_caller))
    elif fmt == "markdown":
        from nsyscomm.views.tables import markdown

        click.echo(visible(markdown(result, units, by_caller)), nl=False)
    elif fmt == "csv":
        from nsyscomm.views.tables import csv

        click.echo(csv(result, by_caller), nl=False)
        for w in result.warnings:  # CSV has no place for them: stderr, like the other formats' notes
            click.echo(f"nsyscomm: warning: {visible_line(w)}", err=True)
    else:
        from nsyscomm.views.text import render

        render(result, console(), units, by_caller)


class _LazyGroup(click.Group):
    """The commands beyond summarize/run, imported only when one of them runs: `nsyscomm --help`
    lists them from _LAZY's short help without importing their modules (gate's alone took 13 ms,
    measured by benchmarks/bench_startup.py)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _LAZY and name not in self.commands:
            module, attr, _ = _LAZY[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in _LAZY and name not in self.commands:
                rows.append((name, make_default_short_help(_LAZY[name][2], limit)))
            elif not self.commands[name].hidden:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


# name -> (module, attribute, the first line of its docstring: tests/test_startup.py checks they agree)
_LAZY = {
    "gate": ("nsyscomm.commands.gate", "gate", "Fail CI when communication got slower than the baseline."),
    "baseline": (
        "nsyscomm.commands.gate",
        "baseline",
        "Write or update a gate baseline from reports or JSON summaries.",
    ),
    "trace": (
        "nsyscomm.commands.views",
        "trace",
        "Export collectives as a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing).",
    ),
    "report": (
        "nsyscomm.commands.views",
        "report",
        "Write a self-contained HTML report (works offline: no CDN, no network).",
    ),
    "export": (
        "nsyscomm.commands.export",
        "export",
        "Write the job of INPUTS (reports, folders) into OUT_DIR in another tool's format.",
    ),
}


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsyscomm")
def main() -> None:
    """nsyscomm: where the communication time of distributed training goes (Nsight Systems)."""


@main.command()
@click.argument("inputs", nargs=-1, type=click.Path(path_type=str))
@click.option(
    "--by",
    "by",
    type=click.Choice(["op", "caller"]),
    default="op",
    show_default=True,
    help="caller: split each op by the call site (DeepSpeed's debug view).",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
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
@click.option(
    "--merge",
    is_flag=True,
    help="Read reports that do not look like one job (ranks or world sizes clash, runs far apart) as one job anyway.",
)
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
    help="Extract on a running Dask cluster (scheduler address, e.g. tcp://host:8786).",
)
@click.option(
    "--memory-limit",
    metavar="SIZE",
    default=None,
    help="Memory of each process's DuckDB (e.g. 4GB, 50%); past it, it spills to "
    "NSYSCOMM_TEMP_DIR (default: the system's temporary folder). Also NSYSCOMM_MEMORY_LIMIT.",
)
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
def summarize(
    inputs: tuple[str, ...],
    by: str,
    fmt: str,
    units: str,
    nccl_logs: tuple[str, ...],
    include_env: bool,
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
        started = len(inputs) == 1 and not dask_address and _head_start(inputs[0], memory_limit, cache=not no_cache)
        with _interrupt_after(), collector_paused():
            from nsyscomm.api import load, sample_jobs
            from nsyscomm.extract import pool  # noqa: F401 - load() imports it: here, with the rest

        scale_opts: dict[str, Any] = {
            "jobs": jobs,
            "cache": not no_cache,
            "dask": dask_address,
            "memory_limit": memory_limit,
            "merge": merge,
        }
        if inputs:
            result = _run_guarded(lambda: load(list(inputs), nccl_logs=nccl_logs, **scale_opts), debug)
            if include_env:
                from nsyscomm.api import environment
                from nsyscomm.views.env_out import emit_with_env

                envs = _run_guarded(lambda: environment(list(inputs)), debug)
                _run_guarded(lambda: emit_with_env(result, envs, fmt, units, by == "caller", emit), debug)
                return
            _run_guarded(functools.partial(emit, result, fmt, units, by == "caller"), debug)
            return
        # no input: a tour of the bundled synthetic samples, each its own job
        samples = sample_jobs()
        if fmt in ("json", "csv"):
            samples = samples[:1]
            click.echo(f"nsyscomm: no input given: showing the bundled sample {samples[0].name}", err=True)
        for job in samples:
            if fmt in ("text", "markdown"):
                click.echo(f"\n=== sample job: {job.name} (synthetic, made by nsyscomm.synth) ===\n")
            result = _run_guarded(functools.partial(load, [job], nccl_logs=nccl_logs, **scale_opts), debug)
            _run_guarded(functools.partial(emit, result, fmt, units, by == "caller"), debug)
    except KeyboardInterrupt:  # during the imports, before any guard: the same line and status
        click.echo("nsyscomm: interrupted", err=True)
        sys.exit(130)
    finally:
        if started:  # whatever ended the run: an untaken head start is stopped and closed
            from nsyscomm.ingest.nsys.reader import drop_head_starts

            drop_head_starts()


@contextlib.contextmanager
def _interrupt_after():
    """Ctrl-C held back until the block has run, then raised. For the imports that run beside a
    head start's reading: a KeyboardInterrupt in the middle of an import can leave Python's import
    lock held (the signal can land between the lock's acquire and the try that releases it): the
    reading thread, whose own imports (pyarrow's, by DuckDB) then waited for it forever, hung the
    command (1 run in 12 with Ctrl-C 0.6 s in, on a loaded machine). The imports take 0.4 s.
    Signal handlers belong to the main thread: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
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
    (nsyscomm.ingest.nsys_reader.head_start): 0.2-0.3 s of a 3 s summarize of 6M rows."""
    from pathlib import Path

    from nsyscomm import duck
    from nsyscomm.extract import cache as report_cache
    from nsyscomm.ingest.nsys import reader as nsys_reader

    p = Path(path)
    try:
        if not p.is_file() or not nsys_reader.is_sqlite(p) or (cache and report_cache.has(p, p.name)):
            return False
        with duck.memory_limit(memory_limit):
            nsys_reader.head_start(p)
        return True
    except Exception:  # noqa: BLE001 - only a head start: the ordinary path reports any problem
        return False


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=str),
    help="Folder for the reports (default: a new nsyscomm-YYYYmmdd-HHMMSS folder).",
)
@click.option("--steps", metavar="A:B", help="Capture only training steps A to B-1 (nsys capture range).")
@click.option("--per-rank", is_flag=True, help="One nsys and one report per torchrun worker (multi-node layout).")
@click.option("--nsys-args", metavar='"..."', help="Extra arguments for nsys profile.")
@click.option(
    "--profiler",
    type=click.Choice(["nsys", "torch"]),
    default="nsys",
    show_default=True,
    help="torch: torch.profiler in each process instead of nsys (one Kineto trace per rank).",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--no-summary", is_flag=True, help="Only capture and export; do not print the summary.")
@click.option(
    "--hang-timeout",
    "hang_timeout",
    metavar="DURATION",
    envvar="NSYSCOMM_HANG_TIMEOUT",
    default=None,
    help="End the job when ranks wait in a collective and none finishes for DURATION (90s, 5m); "
    "the report is kept, the diagnosis printed, exit status 124 (hung). Also NSYSCOMM_HANG_TIMEOUT.",
)
@click.option(
    "--export",
    "export",
    type=click.Choice(["arrow", "sqlite"]),
    default="arrow",
    show_default=True,
    help="Format nsys exports each report to: report.arrow (read directly, the shorter wait: "
    "docs/performance.md) or report.sqlite (for nsys stats and your own SQL); both summarize alike.",
)
@click.option(
    "--preset",
    type=click.Choice(["default", "light", "full"]),
    default="default",
    show_default=True,
    help="What nsys traces. default: NVTX, CUDA and the OS-runtime calls of 100 us or more, without "
    "stacks (the late-arrival causes); light: NVTX and CUDA only, the smallest report; full: nsys's "
    "own OS-runtime defaults, every call with stacks (large on GPU jobs). docs/capture.md.",
)
@click.option(
    "--skip-module",
    "skip_module",
    multiple=True,
    metavar="MODULE",
    help="A communication layer of yours (a module and its submodules) whose frames the caller column "
    "skips to reach your line; repeatable. Also NSYSCOMM_SKIP_MODULES (comma-separated).",
)
@click.option("--debug", is_flag=True, help="Show a traceback on errors.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    output: str | None,
    steps: str | None,
    per_rank: bool,
    nsys_args: str | None,
    profiler: str,
    fmt: str,
    no_summary: bool,
    hang_timeout: str | None,
    export: str,
    preset: str,
    skip_module: tuple[str, ...],
    debug: bool,
    cmd: tuple[str, ...],
) -> NoReturn:
    """Run CMD under nsys with every torch.distributed collective annotated, then summarize.

    \b
      nsyscomm run -- python train.py
      nsyscomm run --steps 10:20 -- torchrun --nproc-per-node 8 train.py

    Exits with CMD's exit status (2 when CMD succeeded but no report was produced; 124 when
    --hang-timeout ended a hung job)."""
    from nsyscomm.api import load
    from nsyscomm.capture import launcher

    if skip_module:  # the job's wrapper reads them from its environment (nsyscomm.capture.wrapper)
        named = [os.environ.get("NSYSCOMM_SKIP_MODULES", ""), *skip_module]
        os.environ["NSYSCOMM_SKIP_MODULES"] = ",".join(m for m in named if m)
    res = _run_guarded(
        lambda: launcher.run(
            list(cmd),
            output=output,
            steps=steps,
            per_rank=per_rank,
            nsys_args=nsys_args,
            stdout_to_stderr=fmt in ("json", "csv"),
            profiler=profiler,
            hang_timeout=hang_timeout,
            export=export,
            preset=preset,
        ),
        debug,
    )
    for w in res.warnings:
        click.echo(f"nsyscomm: warning: {w}", err=True)
    click.echo(f"nsyscomm: report(s) in {res.output_dir}", err=True)
    if res.reports and not no_summary:
        from nsyscomm.capture.post import StageLog  # issue 24: the summarize stage shown and logged

        with StageLog(res.output_dir) as log, log.stage("summarize", list(res.reports)):
            result = _run_guarded(lambda: load(list(res.reports)), debug)
        shown = time.perf_counter()
        _run_guarded(lambda: emit(result, fmt, "GBps", False), debug)  # the analyses run as they are shown
        log.line(f"analyses and summary printed {time.perf_counter() - shown:.2f} s", echo=False)
    elif not res.reports:
        click.echo("nsyscomm: no report was produced", err=True)
        # the command's own failure comes first; a clean run that left no report is ours to flag
        sys.exit(res.exit_code or 2)
    sys.exit(res.exit_code)


def entry(args: Sequence[str] | None = None) -> None:
    """The `nsyscomm` command: main(), then a quick exit. Python's last garbage collection, at
    exit, walks every object pandas and pyarrow made: 0.08-0.09 s of every run (measured on a
    summarize of 6M rows, and on `import pandas` alone). Frozen objects are skipped. Nothing
    left then needs a finalizer: each command's DuckDB databases are freed by reference counting
    when it returns.

    Click's own handling of errors, but for Ctrl-C: before a command has taken over (while click
    dispatches, on a loaded machine), click would end with "Aborted!" and status 1; it is one
    line and status 130 there too, as everywhere else."""
    try:
        rc = main(args, standalone_mode=False)
    except click.ClickException as e:
        e.show()
        rc = e.exit_code
    except click.Abort:
        click.echo("nsyscomm: interrupted", err=True)
        rc = 130
    finally:
        gc.freeze()
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    entry()
