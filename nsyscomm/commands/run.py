"""``nsyscomm run``: a command run under nsys (or torch.profiler), then summarized
(the capture is nsyscomm.capture.launcher.run's)."""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import NoReturn

import click

from nsyscomm import settings
from nsyscomm.capture.exports import DEFAULT_EXPORT, EXPORTS
from nsyscomm.commands import guard
from nsyscomm.commands.options import debug_option, format_option
from nsyscomm.commands.summarize import VIEWS, emit


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
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
@format_option(tuple(VIEWS))
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
    type=click.Choice(EXPORTS),
    default=DEFAULT_EXPORT,
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
@debug_option
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

    Exits with CMD's exit status (2 when CMD succeeded but no report was produced, or nsys could
    not start CMD; 124 when --hang-timeout ended a hung job; 130 when interrupted by Ctrl-C,
    SIGTERM or a hangup, whatever CMD returned). The job's processes never outlive the run."""
    from nsyscomm.api import load
    from nsyscomm.capture.launcher import run as launch

    if skip_module:  # the job's wrapper reads them from its environment (nsyscomm.capture.wrapper)
        named = [*settings.skip_modules(), *skip_module]
        os.environ["NSYSCOMM_SKIP_MODULES"] = ",".join(m for m in named if m)
    res = guard(
        lambda: launch(
            list(cmd),
            while_job_runs=None if no_summary else functools.partial(_prepare_summary, per_rank),
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
        from nsyscomm.capture.post import StageLog  # the summarize stage shown and logged like the others

        with StageLog(res.output_dir) as log, log.stage("summarize", list(res.reports)):
            result = guard(lambda: load(list(res.reports)), debug)
        shown = time.perf_counter()
        guard(lambda: emit(result, fmt, "GBps", False), debug)  # the analyses run as they are shown
        log.line(f"analyses and summary printed {time.perf_counter() - shown:.2f} s", echo=False)
    elif not res.reports:
        click.echo("nsyscomm: no report was produced", err=True)
        # the command's own failure comes first; a clean run that left no report is ours to flag
        sys.exit(res.exit_code or 2)
    sys.exit(res.exit_code)


def _prepare_summary(per_rank: bool) -> None:
    """While the job runs: the summary's imports and, for per-rank reports, the extraction pool's
    fork server (at full priority: its workers inherit it), so that the wait after the job is the
    import, the export and the reading of the report alone."""
    from nsyscomm.capture.beside_job import nice_this_thread
    from nsyscomm.commands import import_summary_stack

    if per_rank:
        from nsyscomm.extract import workers

        workers.warm()
    nice_this_thread()
    import_summary_stack()
