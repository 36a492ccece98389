"""``nsyscomm gate`` and ``nsyscomm baseline``: the CI performance-regression gate (nsyscomm.gate).

Registered lazily by nsyscomm.cli (imported only when one of them runs).

Exit status of ``gate``: 0 pass, 1 regression, 2 unusable input (and bad options), 3 internal
error (a bug of ours: never taken for a regression nor for bad input).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click

from nsyscomm.commands import console as _console
from nsyscomm.commands import guard as _guard
from nsyscomm.commands import outputs
from nsyscomm.commands.options import debug_option, format_option, ops_option, steps_option
from nsyscomm.errors import InputError
from nsyscomm.views.safe import visible, visible_line

EXIT_PASS, EXIT_REGRESSION = 0, 1  # with EXIT_INPUT and EXIT_INTERNAL (nsyscomm.commands)


@dataclass(frozen=True)
class GateOptions:
    """What `nsyscomm gate` was asked, by option name: the sources, the thresholds that override
    the configured settings, and where the report goes."""

    inputs: tuple[str, ...]
    baselines: tuple[str, ...]
    config: str | None = None
    no_pyproject: bool = False
    rel: tuple[str, ...] = ()
    abs_: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    min_calls: int | None = None
    new_keys: str | None = None
    missing_keys: str | None = None
    noise_sigma: float | None = None
    by: str | None = None
    caller_line: bool | None = None
    fmt: str = "text"
    show: str = "changed"
    junit: str | None = None
    output: str | None = None
    step_summary: bool = True
    steps: tuple[int | None, int | None] | None = None
    ops: tuple[str, ...] = ()


def _gate(o: GateOptions) -> int:
    from nsyscomm import gate as g
    from nsyscomm.views import gate_out

    sources = o.inputs + o.baselines + ((o.config,) if o.config else ())
    for out, flag in ((o.output, "--output"), (o.junit, "--junit")):
        if out:
            outputs.check(out, sources, flag=flag)
    settings = g.settings_from(o.config, pyproject=not o.no_pyproject)
    settings = g.override(
        settings,
        rel=o.rel,
        abs_=o.abs_,
        ignore=o.ignore,
        min_calls=o.min_calls,
        new_keys=o.new_keys,
        missing_keys=o.missing_keys,
        noise_sigma=o.noise_sigma,
        level=o.by,
        caller_line=o.caller_line,
    )
    from nsyscomm import api

    # --steps and --ops cut the reports of both sides alike (a JSON summary is taken as it is)
    base = g.load_runs(api.gate_sources(o.baselines, steps=o.steps, ops=o.ops))
    # read once, for both checks
    current = g.load_run(api.gate_sources(o.inputs, one_job=True, steps=o.steps, ops=o.ops))
    verdict = g.compare(base, current, settings)  # a run that hung or desynced fails there too
    if o.fmt == "json":
        text = gate_out.render_json(verdict) + "\n"
    elif o.fmt == "markdown":
        text = visible(gate_out.render_markdown(verdict, o.show))
    else:
        text = None
    if o.output:
        if text is None:
            from nsyscomm.views.safe import SafeConsole as Console

            with outputs.replacing(o.output) as f:
                gate_out.render_text(verdict, Console(file=f, width=200, no_color=True, highlight=False), o.show)
        else:
            outputs.write_text(o.output, text)
    elif text is not None:
        click.echo(text, nl=False)
    else:
        gate_out.render_text(verdict, _console(), o.show)
    if o.junit:
        outputs.write_text(o.junit, gate_out.render_junit(verdict))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if o.step_summary and summary_file:
        try:
            outputs.check(summary_file, o.inputs + o.baselines, flag="$GITHUB_STEP_SUMMARY")
            outputs.append_text(summary_file, gate_out.render_markdown(verdict, o.show) + "\n")
        except (OSError, InputError) as e:  # the verdict stands; a job summary we cannot write must not change it
            click.echo(
                f"nsyscomm: warning: cannot append to $GITHUB_STEP_SUMMARY ({outputs.shown(summary_file)}): "
                f"{visible_line(str(e.strerror if isinstance(e, OSError) and e.strerror else e))}",
                err=True,
            )
    if verdict.hang:
        click.echo(f"nsyscomm: gate FAILED: {visible_line(verdict.hang)}", err=True)
    return verdict.exit_code


@click.command("gate", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--baseline",
    "-b",
    "baselines",
    multiple=True,
    required=True,
    type=click.Path(path_type=str),
    help="Baseline: a JSON summary or baseline file (nsyscomm baseline), or reports. Repeat it "
    "(or use a baseline holding several runs) to give each key a noise band.",
)
@click.option(
    "--config",
    type=click.Path(path_type=str),
    help="TOML file with [tool.nsyscomm.gate] (or [gate], or top-level) settings. "
    "[tool.nsyscomm.gate] of the nearest pyproject.toml is read first.",
)
@click.option("--no-pyproject", is_flag=True, help="Do not read [tool.nsyscomm.gate] from pyproject.toml.")
@click.option(
    "--rel",
    multiple=True,
    metavar="[METRIC=]PCT",
    help="Relative threshold in percent: for every metric (--rel 15) or one (--rel key.busbw_GBps=5; "
    "a bare name like avg_ms means every scope's).",
)
@click.option(
    "--abs",
    "abs_",
    multiple=True,
    metavar="METRIC=VALUE",
    help="Absolute floor in the metric's unit (ms, GB/s, calls): smaller changes never fail.",
)
@click.option(
    "--ignore", multiple=True, metavar="METRIC", help="Do not compare this metric (or scope: key, rank, job)."
)
@click.option(
    "--min-calls",
    type=click.IntRange(min=0),
    help="A key is gated only with at least this many calls on both sides (default 10).",
)
@click.option(
    "--new-keys", type=click.Choice(["fail", "warn", "ignore"]), help="A key absent from the baseline (default fail)."
)
@click.option(
    "--missing-keys",
    type=click.Choice(["fail", "warn", "ignore"]),
    help="A baseline key absent from the run (default warn).",
)
@click.option(
    "--noise-sigma",
    type=click.FloatRange(min=0),
    help="Widen the baseline runs' [min, max] band by this many standard deviations (default 0).",
)
@click.option(
    "--by",
    type=click.Choice(["auto", "op", "caller"]),
    help="Compare per (op, size, n) or per caller too; auto (default): per caller when both sides have it.",
)
@click.option(
    "--caller-line",
    is_flag=True,
    default=None,
    help="Key callers by file:line function, each call site apart (default: file function, which edits "
    "to other lines leave alone).",
)
@format_option(("text", "markdown", "json"))
@click.option(
    "--show",
    type=click.Choice(["changed", "all"]),
    default="changed",
    show_default=True,
    help="Rows to list: what changed, or every comparison.",
)
@click.option(
    "--junit", type=click.Path(dir_okay=False, path_type=str), help="Also write JUnit XML: one test case per key."
)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=str), help="Write the report here instead of stdout."
)
@click.option(
    "--step-summary/--no-step-summary",
    default=True,
    show_default=True,
    help="Append the markdown report to $GITHUB_STEP_SUMMARY when that is set.",
)
@steps_option
@ops_option
@debug_option
def gate(debug: bool, **options: Any) -> NoReturn:
    """Fail CI when communication got slower than the baseline.

    INPUTS: the run to check: nsys SQLite reports, a folder of per-rank reports, or a JSON
    summary (nsyscomm summarize --format json). Exit status: 0 pass, 1 regression,
    2 unusable input, 3 internal error."""
    sys.exit(_guard(lambda: _gate(GateOptions(**options)), debug))


def _baseline(inputs, output, append, keep, each, label):
    from nsyscomm import api
    from nsyscomm import gate as g

    if output:
        outputs.check(output, inputs, flag="--output")
    json_in = [s for s in inputs if g.looks_json(Path(s))]
    reports = [s for s in inputs if s not in json_in]
    runs = []
    if each:
        runs += g.load_runs(api.gate_sources(reports))
    elif reports:
        runs.append(g.load_run(api.gate_sources(reports, one_job=True)))
    runs += g.load_runs(json_in)
    if label:
        for r in runs:
            r.doc["label"] = label
    old = []
    if append:
        if not output:
            raise InputError("--append needs --output FILE (the baseline to add runs to)")
        if Path(output).exists():
            old = g.load_runs([output])
    doc = g.baseline_document(old + runs, keep=keep)
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if output:
        # `--output ci/comm-baseline.json` in a fresh checkout: its folder is made
        outputs.write_text(output, text)
        keys = len({k for r in doc["runs"] for k in g.run_from_doc(r, output).op_rows})
        click.echo(f"nsyscomm: wrote {outputs.shown(output)}: {len(doc['runs'])} run(s), {keys} key(s)", err=True)
    else:
        click.echo(text, nl=False)
    return 0


@click.command("baseline", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=str), help="Baseline file to write (default: stdout)."
)
@click.option(
    "--append",
    is_flag=True,
    help="Add the run(s) to the existing --output baseline (noise band) instead of replacing it.",
)
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Keep at most this many runs (the newest).",
)
@click.option(
    "--each",
    is_flag=True,
    help="Each report argument (file or folder) is a separate run; by default all reports form one job's run.",
)
@click.option("--label", help="Label stored with the run(s), e.g. the commit.")
@debug_option
def baseline(
    inputs: tuple[str, ...], output: str | None, append: bool, keep: int, each: bool, label: str | None, debug: bool
) -> NoReturn:
    """Write or update a gate baseline from reports or JSON summaries.

    All report INPUTS form one run (a job's per-rank reports); each JSON input adds its runs.
    Commit the file and check new runs with: nsyscomm gate --baseline FILE REPORTS."""
    sys.exit(_guard(lambda: _baseline(inputs, output, append, keep, each, label), debug))
