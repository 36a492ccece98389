"""Terminal tables: DeepSpeed's comms-logger summary, then mpitrace's per-rank table and skew."""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nsyscomm.analyses.result import Result
from nsyscomm.views import set_aside
from nsyscomm.views.units import bandwidth, fmt, human_bytes


def summary_table(summary: pd.DataFrame, units: str = "Gbps", by_caller: bool = False) -> Table:
    t = Table(
        box=box.SIMPLE_HEAD,
        title="Communication summary (per logical collective: fastest rank's latency)",
        title_justify="left",
    )
    for name, just in (
        ("Comm. Op", "left"),
        ("Message Size", "right"),
        ("n", "right"),
        ("Count", "right"),
        ("Total Latency(ms)", "right"),
        ("Avg Latency(ms)", "right"),
        (f"tput_avg ({units})", "right"),
        (f"busbw_avg ({units})", "right"),
    ):
        t.add_column(name, justify=just)
    block = None
    for r in summary.itertuples():
        key = (r.op, r.caller if by_caller else None)
        if key != block:
            block = key
            head = (
                r.op if not by_caller else f"{r.op} | [Caller Func: {r.caller if isinstance(r.caller, str) else '?'}]"
            )
            t.add_row(escape(head), "", "", "", "", "", "", "")
        size = human_bytes(None if pd.isna(r.bytes) else r.bytes)
        n = "-" if pd.isna(r.group_size) else str(int(r.group_size))
        t.add_row(
            "",
            size,
            n,
            str(int(r.count)),
            fmt(r.total_ms),
            fmt(r.avg_ms),
            fmt(bandwidth(r.algbw_GBps, units), 2),
            fmt(bandwidth(r.busbw_GBps, units), 2),
        )
    return t


def ranks_table(ranks: pd.DataFrame) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title="Per rank (mpitrace style)", title_justify="left")
    for name in ("rank", "host", "calls", "bytes", "comm (ms)", "wait (ms)", "elapsed (ms)", "% comm"):
        t.add_column(name, justify="left" if name == "host" else "right")
    for r in ranks.itertuples():
        t.add_row(
            str(r.rank),
            escape(str(r.host)) if isinstance(r.host, str) else "-",
            str(int(r.calls)),
            human_bytes(r.bytes),
            fmt(r.comm_ms),
            fmt(r.wait_ms),
            fmt(r.elapsed_ms),
            fmt(r.comm_pct, 2),
        )
    return t


def min_med_max(ranks: pd.DataFrame) -> list[str]:
    """mpitrace's closing lines: which rank spent least / median / most time communicating."""
    if ranks.empty:
        return []
    s = ranks.sort_values(["comm_ms", "rank"]).reset_index(drop=True)
    picks = (("minimum", 0), ("median", (len(s) - 1) // 2), ("maximum", len(s) - 1))
    return [
        f"{label} communication time = {s.loc[i, 'comm_ms']:.3f} ms for rank {int(s.loc[i, 'rank'])}"
        for label, i in picks
    ]


def render(result: Result, console: Console, units: str = "Gbps", by_caller: bool = False) -> None:
    n = result.n_calls
    reports = ", ".join(result.reports) if len(result.reports) <= 4 else f"{len(result.reports)} reports"
    if n == 0:
        console.print(f"No collective calls found in {escape(reports)}.")
        for w in result.warnings:
            console.print(f"[yellow]warning:[/] {escape(w)}")
        return
    result.prefetch(
        ("summary", {"by_caller": by_caller}),
        ("ranks", {}),
        ("steps", {}),
        ("size_histogram", {}),
        ("link_metrics", {}),
        ("skew", {}),
        ("top_skew", {"limit": 5}),
    )
    console.print(f"[bold]nsyscomm[/] — {n} collective calls in {escape(reports)}")
    hang_lines = _hang_lines(result)  # issue 22: the hang diagnosis comes first
    for line in hang_lines:
        console.print(f"[bold red]{escape(line)}[/]" if not line.startswith(" ") else escape(line))
    for line in nccl_header(result):
        console.print(escape(line))
    if not hang_lines:  # issue 21: why a rank is late, first (a hung job's diagnosis is the hang)
        from nsyscomm.views import diagnosis_out

        diagnosis_out.render(result, console)
    console.print(summary_table(result.summarize(by_caller=by_caller), units, by_caller))
    _set_aside(result, console)
    _vs_reference(result, console, units, by_caller)
    ranks = result.ranks
    console.print(ranks_table(ranks))
    for line in min_med_max(ranks):
        console.print(line)
    _overlap(result, console)
    _steps(result, console)
    _histogram(result, console)
    _links(result, console)
    skew = result.skew
    if skew["straggler_rank"] is not None and not hang_lines:  # a hung job has no straggler to speak of
        per = {p["rank"]: p for p in skew["per_rank"]}
        s = per[skew["straggler_rank"]]
        _top_skew(result, console)
        console.print(
            f"straggler: rank {skew['straggler_rank']} arrived last in {s['late_count']} of "
            f"{skew['instances']} shared collectives (mean arrival delay {s['avg_arrival_delay_ms']:.3f} ms)"
        )
    from nsyscomm.views import whatif_out  # what-if replay (issue 23)

    whatif_out.render(result, console)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def _hang_lines(result: Result) -> list[str]:
    from nsyscomm.analyses.hang import lines

    return lines(result.hang)


def _table(title: str, columns: list[str]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 and not c.startswith("rank") else "right")
    return t


def _overlap(result: Result, console: Console) -> None:
    ov = result.overlap
    per_rank = ov[ov["scope"] == "rank"]
    if per_rank.empty:
        return
    t = _table("Exposed communication (not hidden by compute)", ["rank", "comm busy (ms)", "exposed (ms)", "exposed %"])
    for r in per_rank.itertuples():
        t.add_row(str(r.rank), fmt(r.comm_busy_ns / 1e6), fmt(r.exposed_ns / 1e6), fmt(r.exposed_pct, 1))
    console.print(t)


def _steps(result: Result, console: Console) -> None:
    steps = result.steps
    if steps.empty:
        return
    ov = result.overlap
    exposed = ov[ov["scope"] == "step"].groupby("step")["exposed_ns"].sum() if not ov.empty else pd.Series(dtype=float)
    t = _table(
        "Per step",
        [
            "step",
            "calls",
            "comm (ms, all ranks)",
            "busiest rank",
            "its comm (ms)",
            "avg skew (ms)",
            "max skew (ms)",
            "exposed (ms, all ranks)",
        ],
    )
    warm = set_aside.warmup_steps(result)
    for r in steps.itertuples():
        t.add_row(
            f"{r.step} warm-up" if r.step in warm else str(r.step),
            str(int(r.calls)),
            fmt(r.comm_ms),
            str(r.max_rank),
            fmt(r.max_rank_comm_ms),
            fmt(r.avg_skew_ms),
            fmt(r.max_skew_ms),
            fmt(exposed.get(r.step) / 1e6) if r.step in exposed.index else "-",
        )
    console.print(t)


def _set_aside(result: Result, console: Console) -> None:
    for line in set_aside.lines(result):
        console.print(escape(line))


def _histogram(result: Result, console: Console) -> None:
    h = result.size_histogram
    if h.empty:
        return
    t = _table(
        "Message sizes (power-of-two bins, mpitrace style)", ["op", "size range", "#calls", "avg bytes", "time (ms)"]
    )
    last = None
    for r in h.itertuples():
        rng = "0" if r.bin_hi == 0 else f"[{human_bytes(r.bin_lo)}, {human_bytes(r.bin_hi)})"
        t.add_row(r.op if r.op != last else "", rng, str(int(r.calls)), f"{r.avg_bytes:.0f}", fmt(r.total_ms))
        last = r.op
    console.print(t)


def _links(result: Result, console: Console) -> None:
    links = result.link_metrics
    if links.empty:
        return
    t = _table(
        "Link throughput during collectives (nsys GPU metrics: time-weighted mean over the calls' GPU time)",
        ["op", "size", "metric", "#calls", "GPUs", "mean", "peak"],
    )
    last = None
    for r in links.itertuples():
        key = (r.op, r.bytes)
        t.add_row(
            r.op if key != last else "",
            human_bytes(r.bytes) if key != last else "",
            r.metric,
            str(int(r.calls)),
            str(int(r.devices)),
            fmt(r.avg_value, 1),
            fmt(r.max_value, 1),
        )
        last = key
    console.print(t)


def _top_skew(result: Result, console: Console, limit: int = 5) -> None:
    top = result.top_skew(limit)
    if top.empty or top["skew_ms"].max() <= 0:
        return
    t = _table(
        f"Top {limit} collectives by arrival skew",
        ["op", "size", "group/seq", "step", "last rank", "skew (ms)", "caller"],
    )
    for r in top.itertuples():
        t.add_row(
            r.op,
            human_bytes(None if pd.isna(r.bytes) else r.bytes),
            escape(f"{r.group if isinstance(r.group, str) else '-'}/{r.seq}"),
            "-" if pd.isna(r.step) else str(int(r.step)),
            str(r.last_rank),
            fmt(r.skew_ms),
            escape(r.caller) if isinstance(r.caller, str) else "-",
        )
    console.print(t)


def nccl_header(result: Result) -> list[str]:
    """One line of NCCL context per --nccl-log, and one per nccl-tests table in it."""
    lines = []
    for log in result.nccl_logs:
        parts = [f"NCCL {log.version or '?'}" + (f" (CUDA {log.cuda})" if log.cuda else "")]
        if log.nranks:
            parts.append(f"{log.nranks} ranks" + (f" on {log.nodes} nodes" if log.nodes else ""))
        if log.transports:
            tr = ", ".join(
                f"{k}{' (GDR)' if k.startswith('NET') and log.gdr else ''} {v}" for k, v in log.transports.items()
            )
            parts.append(tr + (", NVLS" if log.nvls else ""))
        ch = log.channels or {}
        if ch:
            parts.append("channels " + ", ".join(f"{ch[k]} {k}" for k in ("coll", "nvls", "p2p") if k in ch))
        if log.tuner:
            parts.append(f"tuner {log.tuner}")
        lines.append(" | ".join(parts))
        for t in log.nccl_tests:
            lines.append(
                f"nccl-tests {t['op']}, {t['ranks']} ranks: peak busbw {t['peak_busbw_GBps']:.2f} GB/s "
                f"at {human_bytes(t['peak_at_bytes'])}, avg {t['avg_busbw_GBps']:.2f} GB/s"
            )
    return lines


def _vs_reference(result: Result, console: Console, units: str, by_caller: bool) -> None:
    vs = result.vs_reference(by_caller)
    if vs.empty:
        return
    t = _table(
        "Against the nccl-tests reference (same op, interpolated at the same size)",
        ["op", "Message Size", f"busbw ({units})", f"ref busbw ({units})", "% of ref"],
    )
    for r in vs.itertuples():
        t.add_row(
            r.op,
            human_bytes(r.bytes),
            fmt(bandwidth(r.busbw_GBps, units), 2),
            fmt(bandwidth(r.ref_busbw_GBps, units), 2),
            fmt(100 * r.busbw_vs_ref, 1),
        )
    console.print(t)
