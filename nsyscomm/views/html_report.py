"""A self-contained HTML report: one file, no network (inline CSS, inline SVG, inline script).

Sections: overview and warnings; summary per (op, size); bus bandwidth against message size
per op (the nccl-tests curve), with an optional peak line; per-rank communication and wait
bars with mpitrace's table; a rank x logical-collective arrival-skew heatmap; exposed
communication per step; link throughput; the diagnosis and what-if sections; top callers.
The charts are in html_charts, the tables in html_sections, shared pieces in html_parts; the
page's CSS and scripts are package files (views/assets/: report.css, error_hook.js, which
records page errors into <html data-errors> for a headless browser's --dump-dom and must run
first, and report.js, the sortable tables).

Everything taken from reports (kernel names, NVTX strings, callers, paths, hosts) is
untrusted: it goes through ``html.escape``, and the JSON embedded in ``<script>`` has ``<``,
``>`` and ``&`` escaped. A Content-Security-Policy forbids every network load.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING

import pandas as pd

from nsyscomm import __version__
from nsyscomm.analyses.invariants import lines as invariant_lines
from nsyscomm.views import findings as F
from nsyscomm.views import json_out
from nsyscomm.views.html_charts import busbw_chart, rank_bars, skew_heatmap
from nsyscomm.views.html_parts import _e, _num, _table, json_for_script
from nsyscomm.views.html_sections import callers_section, exposed_section, ranks_table, skew_text, summary_section
from nsyscomm.views.units import fmt, human_bytes

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
)


@functools.cache
def _asset(name: str) -> str:
    """A file of views/assets/, inlined into the page."""
    return (resources.files("nsyscomm.views") / "assets" / name).read_text(encoding="utf-8")


def render(result: Result, *, peak_busbw: float | None = None, title: str | None = None) -> str:
    from nsyscomm.views.findings import skipped_lines  # the files of input folders not read

    # the analyses withheld for breaking an invariant: their reason, in place of their figures
    warnings = invariant_lines(result.withheld) + list(result.warnings)
    overlap_html = None
    try:
        overlap_html = exposed_section(result.overlap, set(result.warmup["steps"]))
    except Exception as e:  # the page still renders without this section
        warnings.append(f"exposed communication not shown: the overlap analysis failed ({type(e).__name__}: {e})")
    reports = [str(r) for r in result.reports]
    title = title or ("nsyscomm report: " + (", ".join(reports) if len(reports) <= 3 else f"{len(reports)} reports"))
    data = json_out.document(result)  # the JSON output contract, embedded for scripts
    data["peak_busbw_GBps"] = peak_busbw
    # the files of the input folders not read are notes, as in the text view: a run folder's
    # .nsys-rep beside its export is the usual case, nothing to warn of
    sections = [_warnings_box(warnings), _not_read(skipped_lines(result)), _set_aside(result)]
    sections += _measured_sections(result, peak_busbw, overlap_html)
    sections += _finding_sections(result)
    return _page(title, reports, _cards(result), sections, data)


def _cards(result: Result) -> list[tuple[str, str]]:
    """The overview's figures: (label, value)."""
    ranks = result.ranks
    straggler = result.skew.get("straggler_rank")
    total_comm = _num(pd.to_numeric(ranks["comm_ms"], errors="coerce").sum()) if len(ranks) else None
    total_wait = _num(pd.to_numeric(ranks["wait_ms"], errors="coerce").sum()) if len(ranks) else None
    return [
        ("collective calls", str(result.n_calls)),
        ("logical collectives", str(result.n_logical)),
        ("ranks", str(len(ranks))),
        ("communication (ms, all ranks)", fmt(total_comm)),
        ("waiting (ms, all ranks)", fmt(total_wait)),
        ("straggler", "-" if straggler is None else f"rank {straggler}"),
    ]


def _warnings_box(warnings: list[str]) -> str:
    if not warnings:
        return ""
    return '<div class="warn"><b>Warnings</b><ul>' + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul></div>"


def _not_read(lines: list[str]) -> str:
    if not lines:
        return ""
    return '<div class="note"><b>Files not read</b><ul>' + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul></div>"


def _measured_sections(result: Result, peak_busbw: float | None, overlap_html: str | None) -> list[str]:
    """What was measured: per op and size, bandwidth, per rank, arrival skew, exposure, links."""
    summary = result.summarize(by_caller=False)
    ranks, skew = result.ranks, result.skew
    sections = [
        '<h2 id="summary">Summary per operation and message size</h2>'
        + summary_section(F.summary(result, by_caller=False)),
        '<h2 id="busbw">Bus bandwidth against message size</h2>'
        + busbw_chart(summary, peak_busbw)
        + '<p class="note">One curve per op, as nccl-tests draws it: busbw = message size / latency '
        "x the op's factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, "
        "all_to_all; 1 for broadcast, reduce, send, recv)."
        + (" The dashed line is the peak given with --peak-busbw." if peak_busbw else "")
        + "</p>",
        '<h2 id="ranks">Communication and waiting per rank</h2>'
        + rank_bars(ranks, skew.get("straggler_rank"))
        + ranks_table(F.ranks(result))
        + ranks_table(F.rank_ops(result))
        + '<p class="note">wait: the part of a call beyond its logical collective\'s latency (the '
        "fastest rank's duration), i.e. time spent waiting for the other ranks to arrive. "
        "* marks the straggler.</p>",
        '<h2 id="skew">Arrival skew: rank x collective</h2>'
        + skew_text(skew)
        + skew_heatmap(result.arrival_matrix)
        + '<p class="note">Each cell: how long after the first rank this rank started the collective. '
        "A row that stays dark is a late rank; a dark column is one slow step.</p>",
    ]
    if overlap_html is not None:
        sections.append(
            '<h2 id="exposed">Exposed communication (not hidden behind compute)</h2>'
            + overlap_html
            + '<p class="note">Exposed: communication time not overlapped by compute kernels.</p>'
        )
    sections.append(_links_section(result))
    return sections


def _links_section(result: Result) -> str:
    links = getattr(result, "link_metrics", None)
    if links is None or links.empty:
        return ""
    rows = [
        [
            r.op,
            (human_bytes(r.bytes), r.bytes),
            r.metric,
            int(r.calls),
            int(r.devices),
            (fmt(r.avg_value, 1), r.avg_value),
            (fmt(r.max_value, 1), r.max_value),
        ]
        for r in links.itertuples()
    ]
    return (
        '<h2 id="links">Link throughput during collectives</h2>'
        + _table(["op", "size", "metric", "calls", "GPUs", "mean", "peak"], rows, numeric={1, 3, 4, 5, 6})
        + '<p class="note">nsys GPU metrics (--gpu-metrics-devices): each link counter\'s samples '
        "weighed by the time they share with the calls' kernels on the same GPU.</p>"
    )


def _finding_sections(result: Result) -> list[str]:
    """What nsyscomm concludes: the diagnosis, the what-if replay, the top callers."""
    from nsyscomm.views import (
        diagnosis_html,  # why late, step waterfall
        whatif_html,  # what-if replay
    )

    sections = []
    diagnosis_section = diagnosis_html.section(result)
    if diagnosis_section:
        sections.append(
            '<h2 id="diagnosis">Diagnosis: where each step goes, who is late and why</h2>' + diagnosis_section
        )
    whatif_section = whatif_html.section(result)
    if whatif_section:
        sections.append('<h2 id="whatif">What-if: step time measured and replayed</h2>' + whatif_section)
    sections.append('<h2 id="callers">Top callers</h2>' + callers_section(result.summarize(by_caller=True)))
    return sections


def _page(title: str, reports: list[str], cards: list[tuple[str, str]], sections: list[str], data: dict) -> str:
    """The whole page around the sections: head (CSP, inline CSS and scripts), cards, the data."""
    return f"""<!DOCTYPE html>
<html lang="en" data-errors="">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="nsyscomm {_e(__version__)}">
<title>{_e(title)}</title>
<script>
{_asset("error_hook.js")}</script>
<style>
{_asset("report.css")}</style>
</head>
<body>
<h1>{_e(title)}</h1>
<p class="sub">{_e(", ".join(reports))}</p>
<div class="cards">{"".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in cards)}</div>
{"".join(sections)}
<footer>Generated by nsyscomm {_e(__version__)}. The data of this page (JSON output contract, schema
{_e(data.get("schema"))}) is embedded in <code>script#nsyscomm-data</code>.</footer>
<script type="application/json" id="nsyscomm-data">{json_for_script(data)}</script>
<script>
{_asset("report.js")}</script>
</body>
</html>
"""


def _set_aside(result: Result) -> str:
    """What the statistics set aside (setup calls, start-up skew, warm-up steps), in words."""
    from nsyscomm.views import set_aside

    lines = set_aside.lines(result)
    if not lines:
        return ""
    return '<div class="note"><b>Set aside</b><ul>' + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul></div>"
