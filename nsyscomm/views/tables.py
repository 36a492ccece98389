"""Markdown and CSV renderings of the same tables as the terminal view."""

from __future__ import annotations

import html
import io

import pandas as pd

from nsyscomm.analyses.result import Result
from nsyscomm.views.units import bandwidth, fmt, human_bytes


def _md_cell(v) -> str:
    # report text is untrusted: no raw HTML, no table breaks
    return html.escape(str(v), quote=False).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def markdown(result: Result, units: str = "Gbps", by_caller: bool = False) -> str:
    s = result.summarize(by_caller=by_caller)
    header = (
        ["Comm. Op"]
        + (["Caller"] if by_caller else [])
        + [
            "Message Size",
            "n",
            "Count",
            "Total Latency(ms)",
            "Avg Latency(ms)",
            f"tput_avg ({units})",
            f"busbw_avg ({units})",
        ]
    )
    rows = []
    for r in s.itertuples():
        rows.append(
            [r.op]
            + ([r.caller if isinstance(r.caller, str) else "?"] if by_caller else [])
            + [
                human_bytes(None if pd.isna(r.bytes) else r.bytes),
                "-" if pd.isna(r.group_size) else int(r.group_size),
                int(r.count),
                fmt(r.total_ms),
                fmt(r.avg_ms),
                fmt(bandwidth(r.algbw_GBps, units), 2),
                fmt(bandwidth(r.busbw_GBps, units), 2),
            ]
        )
    ranks = result.ranks
    rrows = [
        [
            int(r.rank),
            r.host if isinstance(r.host, str) else "-",
            int(r.calls),
            human_bytes(r.bytes),
            fmt(r.comm_ms),
            fmt(r.wait_ms),
            fmt(r.elapsed_ms),
            fmt(r.comm_pct, 2),
        ]
        for r in ranks.itertuples()
    ]
    from nsyscomm.analyses.hang import lines as hang_lines  # issue 22: the diagnosis first

    hang = hang_lines(result.hang)
    parts = (["## Hang diagnosis", "", "```", *hang, "```", ""] if hang else []) + [
        "## Communication summary",
        "",
        _md_table(header, rows),
        "",
        "## Per rank",
        "",
        _md_table(["rank", "host", "calls", "bytes", "comm (ms)", "wait (ms)", "elapsed (ms)", "% comm"], rrows),
    ]
    links = result.link_metrics
    if not links.empty:
        lrows = [
            [
                r.op,
                human_bytes(r.bytes),
                r.metric,
                int(r.calls),
                int(r.devices),
                fmt(r.avg_value, 1),
                fmt(r.max_value, 1),
            ]
            for r in links.itertuples()
        ]
        parts += [
            "",
            "## Link throughput during collectives (nsys GPU metrics)",
            "",
            _md_table(["op", "size", "metric", "calls", "GPUs", "mean", "peak"], lrows),
        ]
    if result.warnings:
        parts += ["", "## Warnings", ""] + [f"- {_md_cell(w)}" for w in result.warnings]
    return "\n".join(parts) + "\n"


def csv(result: Result, by_caller: bool = False) -> str:
    """The summary as CSV, its text cells spreadsheet-safe (safe.csv_cell: a cell that would start
    a formula gets a leading ', control characters are shown; numbers stay numbers; issue 26)."""
    from nsyscomm.views.safe import csv_cell

    s = result.summarize(by_caller=by_caller)
    s = s.apply(lambda c: c.map(csv_cell) if c.dtype == object or pd.api.types.is_string_dtype(c) else c)
    buf = io.StringIO()
    s.to_csv(buf, index=False)
    return buf.getvalue()
