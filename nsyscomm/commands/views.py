"""``nsyscomm trace`` and ``nsyscomm report``: thin click commands over nsyscomm.views.

Registered lazily by nsyscomm.cli (imported only when one of them runs).
"""

from __future__ import annotations

import click

from nsyscomm.commands import collector_paused
from nsyscomm.commands import guard as _guard
from nsyscomm.commands.options import debug_option, inputs_argument, merge_option, ops_option, steps_option


def _load(inputs, debug, merge: bool = False, steps=None, ops: tuple[str, ...] = ()):
    with collector_paused():
        from nsyscomm.api import load

    return _guard(lambda: load(list(inputs) or None, merge=merge, steps=steps, ops=ops), debug)


@click.command("trace")
@inputs_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="Trace file to write ('-' for stdout). Default: trace.json, unless --per-rank is given; "
    "an existing trace.json is replaced only when named.",
)
@steps_option
@ops_option
@click.option(
    "--per-rank",
    "per_rank",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    metavar="DIR",
    help="Also write one trace per rank as DIR/<rank>/comm.json (BytePS's layout).",
)
@click.option(
    "--what-if",
    "what_if",
    metavar="SCENARIO",
    default=None,
    help="Add the replayed timeline of a what-if scenario (no_straggler, ideal, ...) beside the measured one.",
)
@merge_option
@debug_option
def trace(
    inputs: tuple[str, ...],
    output: str | None,
    steps: tuple[int | None, int | None] | None,
    ops: tuple[str, ...],
    per_rank: str | None,
    what_if: str | None,
    merge: bool,
    debug: bool,
) -> None:
    """Export collectives as a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing).

    One track per rank and GPU stream, one event per collective call, arrows linking the calls
    of one logical collective across ranks, and a bytes-in-flight counter per rank.
    With no INPUTS, the bundled sample reports are used."""
    from nsyscomm.commands import outputs
    from nsyscomm.views import trace as tr

    named = output is not None
    if output is None and per_rank is None:
        output = "trace.json"
    if output is not None and output != "-":
        _guard(lambda: outputs.check(output, inputs, named=named), debug)
    if per_rank is not None:
        # its comm.json files are traces, which carry nsyscomm's mark: never read back as reports
        _guard(lambda: outputs.check(per_rank, inputs, flag="--per-rank", folder=True, read_back=False), debug)
    result = _load(inputs, debug, merge, steps, ops)
    if output == "-":
        doc = _guard(lambda: tr.build(result, what_if=what_if), debug)
        click.echo(tr.dumps(doc))
        _guard(lambda: tr.write(result, None, per_rank_dir=per_rank, write_file=outputs.write_text), debug)
        return
    # the steps and ops asked for are the loaded job's (load cut its table to them)
    files = _guard(
        lambda: tr.write(result, output, per_rank_dir=per_rank, what_if=what_if, write_file=outputs.write_text),
        debug,
    )
    if output is not None:
        click.echo(f"wrote {outputs.shown(output)} (open it in https://ui.perfetto.dev or chrome://tracing)", err=True)
    if per_rank is not None:
        click.echo(
            f"wrote {len([f for f in files if f.name == 'comm.json'])} per-rank trace(s) under "
            f"{outputs.shown(per_rank)}/",
            err=True,
        )


@click.command("report")
@inputs_argument
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="HTML file to write ('-' for stdout). Default: report.html, which is never replaced unless named.",
)
@click.option(
    "--peak-busbw",
    "peak_busbw",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="GBps",
    help="Draw the hardware's peak bus bandwidth (GB/s) on the bandwidth chart.",
)
@click.option("--title", default=None, help="Page title (default: the report names).")
@steps_option
@ops_option
@merge_option
@debug_option
def report(
    inputs: tuple[str, ...],
    output: str | None,
    peak_busbw: float | None,
    title: str | None,
    steps: tuple[int | None, int | None] | None,
    ops: tuple[str, ...],
    merge: bool,
    debug: bool,
) -> None:
    """Write a self-contained HTML report (works offline: no CDN, no network).

    Summary tables, bus bandwidth against message size, per-rank communication and wait,
    a rank x collective arrival-skew heatmap, exposed communication per step (when the
    overlap analysis is available) and top callers. With no INPUTS, the bundled samples are used."""
    from nsyscomm.commands import outputs
    from nsyscomm.views import html_report

    named = output is not None
    output = output or "report.html"
    if output != "-":
        _guard(lambda: outputs.check(output, inputs, named=named), debug)
    result = _load(inputs, debug, merge, steps, ops)
    page = _guard(lambda: html_report.render(result, peak_busbw=peak_busbw, title=title), debug)
    if output == "-":
        click.echo(page, nl=False)
        return
    _guard(lambda: outputs.write_text(output, page), debug)
    click.echo(f"wrote {outputs.shown(output)}", err=True)
