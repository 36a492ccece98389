"""Terminal tables: DeepSpeed's comms-logger summary, then mpitrace's per-rank table and skew."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich import box

from nsyscomm.api import Result
from nsyscomm.views.units import bandwidth, fmt, human_bytes


def summary_table(summary: pd.DataFrame, units: str = "Gbps", by_caller: bool = False) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title="Communication summary (per logical collective: fastest rank's latency)",
              title_justify="left")
    for name, just in (("Comm. Op", "left"), ("Message Size", "right"), ("n", "right"), ("Count", "right"),
                       ("Total Latency(ms)", "right"), ("Avg Latency(ms)", "right"),
                       (f"tput_avg ({units})", "right"), (f"busbw_avg ({units})", "right")):
        t.add_column(name, justify=just)
    block = None
    for r in summary.itertuples():
        key = (r.op, r.caller if by_caller else None)
        if key != block:
            block = key
            head = r.op if not by_caller else f"{r.op} | [Caller Func: {r.caller if isinstance(r.caller, str) else '?'}]"
            t.add_row(escape(head), "", "", "", "", "", "", "")
        size = human_bytes(None if pd.isna(r.bytes) else r.bytes)
        n = "-" if pd.isna(r.group_size) else str(int(r.group_size))
        t.add_row("", size, n, str(int(r.count)), fmt(r.total_ms), fmt(r.avg_ms),
                  fmt(bandwidth(r.algbw_GBps, units), 2), fmt(bandwidth(r.busbw_GBps, units), 2))
    return t


def ranks_table(ranks: pd.DataFrame) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title="Per rank (mpitrace style)", title_justify="left")
    for name in ("rank", "host", "calls", "bytes", "comm (ms)", "wait (ms)", "elapsed (ms)", "% comm"):
        t.add_column(name, justify="left" if name == "host" else "right")
    for r in ranks.itertuples():
        t.add_row(str(r.rank), escape(str(r.host)) if isinstance(r.host, str) else "-", str(int(r.calls)),
                  human_bytes(r.bytes), fmt(r.comm_ms), fmt(r.wait_ms), fmt(r.elapsed_ms), fmt(r.comm_pct, 2))
    return t


def min_med_max(ranks: pd.DataFrame) -> list[str]:
    """mpitrace's closing lines: which rank spent least / median / most time communicating."""
    if ranks.empty:
        return []
    s = ranks.sort_values(["comm_ms", "rank"]).reset_index(drop=True)
    picks = (("minimum", 0), ("median", (len(s) - 1) // 2), ("maximum", len(s) - 1))
    return [f"{label} communication time = {s.loc[i, 'comm_ms']:.3f} ms for rank {int(s.loc[i, 'rank'])}"
            for label, i in picks]


def render(result: Result, console: Console, units: str = "Gbps", by_caller: bool = False) -> None:
    n = result.n_calls
    reports = ", ".join(result.reports) if len(result.reports) <= 4 else f"{len(result.reports)} reports"
    if n == 0:
        console.print(f"No collective calls found in {escape(reports)}.")
        for w in result.warnings:
            console.print(f"[yellow]warning:[/] {escape(w)}")
        return
    console.print(f"[bold]nsyscomm[/] — {n} collective calls in {escape(reports)}")
    console.print(summary_table(result.summarize(by_caller=by_caller), units, by_caller))
    ranks = result.ranks
    console.print(ranks_table(ranks))
    for line in min_med_max(ranks):
        console.print(line)
    skew = result.skew
    if skew["straggler_rank"] is not None:
        per = {p["rank"]: p for p in skew["per_rank"]}
        s = per[skew["straggler_rank"]]
        console.print(f"straggler: rank {skew['straggler_rank']} arrived last in {s['late_count']} of "
                      f"{skew['instances']} shared collectives (mean arrival delay {s['avg_arrival_delay_ms']:.3f} ms)")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
