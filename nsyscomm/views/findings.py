"""Every finding of a summary, made once for every format, so that the formats never disagree: the
tables and the lines of the text view, in order, as data. text.py draws them as rich tables,
tables.py as Markdown and as one CSV, each in its own idiom, so no format drops a finding and a
figure reads alike in all of them. Values stay raw here; `display` formats a cell for people
(sizes human-readable, bandwidth in the chosen unit) and `machine` for a CSV (integers as
integers, times rounded to the nanosecond the data holds, bandwidth in GB/s as the JSON has it)."""

from __future__ import annotations

import pandas as pd

from nsyscomm.analyses.contract import SUMMARY_KEYS
from nsyscomm.analyses.invariants import lines as invariant_lines
from nsyscomm.analyses.result import Result
from nsyscomm.capture.run_folder import OWN_OUTPUT
from nsyscomm.views import set_aside
from nsyscomm.views.columns import (  # noqa: F401 - the column contract, read through this module too
    ABSENT,
    HTML_TABLES,
    Block,
    Col,
    Lines,
    Table,
    contract_cols,
    display,
    header,
    machine,
    missing,
)
from nsyscomm.views.units import human_bytes


def headline(result: Result) -> str:
    reports = ", ".join(result.reports) if len(result.reports) <= 4 else f"{len(result.reports)} reports"
    if result.n_calls == 0:
        return f"No collective calls found in {reports}."
    return f"nsyscomm — {result.n_calls} collective calls in {reports}"


def blocks(result: Result, by_caller: bool = False) -> list[Block]:
    """The summary's findings in the order every format shows them."""
    if result.n_calls == 0:
        return _closing(result)
    result.prefetch(
        ("summary", {"by_caller": by_caller}),
        ("ranks", {}),
        ("rank_ops", {}),
        ("steps", {}),
        ("size_histogram", {}),
        ("link_metrics", {}),
        ("skew", {}),
        ("top_skew", {"limit": 5}),
    )
    from nsyscomm.analyses.hang import lines as hang_lines
    from nsyscomm.views import diagnosis_out, whatif_out

    out: list[Block] = []
    hang = hang_lines(result.hang)  # the hang diagnosis comes first
    if hang:
        out.append(Lines("hang", "Hang diagnosis", hang))
    out.append(Lines("nccl", None, nccl_header(result)))
    if not hang:  # why a rank is late, first (a hung job's diagnosis is the hang)
        out.append(Lines("diagnosis", "Diagnosis", diagnosis_out.lines(result)))
    # the analyses that broke an invariant on this input: the reason, never their figures
    out.append(Lines("withheld", None, invariant_lines(result.withheld)))
    out.append(summary(result, by_caller))
    # the setup calls, start-up collectives and warm-up steps the statistics leave out
    out.append(Lines("set_aside", None, set_aside.lines(result)))
    out.append(vs_reference(result, by_caller))
    out.append(ranks(result))
    out.append(rank_ops(result))
    out.append(overlap(result))
    out.append(steps(result))
    out.append(histogram(result))
    out.append(links(result))
    skew = result.skew
    if skew["straggler_rank"] is not None and not hang:  # a hung job has no straggler to speak of
        out.append(top_skew(result))
        s = next(p for p in skew["per_rank"] if p["rank"] == skew["straggler_rank"])
        out.append(
            Lines(
                "straggler",
                None,
                [
                    f"straggler: rank {skew['straggler_rank']} kept the others waiting "
                    f"{skew['straggler_wait_caused_ms']:.3f} ms in all; it arrived last in {s['late_count']} of "
                    f"{skew['instances']} shared collectives (mean arrival delay {s['avg_arrival_delay_ms']:.3f} ms)"
                ],
            )
        )
    out.append(Lines("what_if", whatif_out.TITLE, whatif_out.lines(result)))
    out += _closing(result)
    return [b for b in out if (b.rows if isinstance(b, Table) else b.lines)]


def _closing(result: Result) -> list[Block]:
    out: list[Block] = []
    if result.n_calls == 0 and not result.inspector_buckets.empty:  # all a user has: Inspector's metrics
        out.append(inspector_buckets(result))
    return out + [Lines("warning", None, list(result.warnings)), Lines("note", None, skipped_lines(result))]


def inspector_buckets(result: Result) -> Table:
    cols = [
        Col("op", "op"),
        Col("nranks", "n", "int"),
        Col("message_size", "size bucket"),
        Col("algo_proto", "algo_proto"),
        Col("gpus", "GPUs", "int"),
        Col("exec_us", "mean time (us)", "bw"),
        Col("busbw_gbs", "busbw (GB/s)", "bw"),
        Col("min_busbw_gbs", "slowest GPU (GB/s)", "bw"),
    ]
    title = "NCCL Inspector metrics (Prometheus buckets: no call of its own, so no ranks, skew or timeline)"
    return Table("inspector_buckets", title, cols, _rows(result.inspector_buckets, cols))


def skipped_lines(result: Result, shown: int = 6) -> list[str]:
    """The files of the input folders that were not read, one line per reason; nsyscomm's own
    files (its run folder's, its outputs) are not news to the user and go unnamed."""
    by: dict[str, list[str]] = {}
    for path, why in result.skipped:
        if why == OWN_OUTPUT:
            continue
        by.setdefault(why, []).append(path)
    out = []
    for why, paths in by.items():
        names = ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
        out.append(f"not read ({why}): {names}")
    return out


def summary(result: Result, by_caller: bool = False) -> Table:
    s = result.summarize(by_caller=by_caller)
    cols = [
        Col("op", "Comm. Op"),
        Col("caller", "Caller", shown=by_caller),
        Col("bytes", "Message Size", "bytes"),
        Col("group_size", "n", "int"),
        Col("count", "Count", "int"),
        Col("calls", "calls", "int", shown=False),
        Col("ranks", "ranks", "int", shown=False),
        Col("total_ms", "Total Latency(ms)", "ms"),
        Col("avg_ms", "Avg Latency(ms)", "ms"),
        # beside the latency, never inside it: the time the calls waited behind earlier calls on
        # their queue (a gloo process group's worker threads, an NCCL stream)
        Col("queued_ms", "Avg Queued(ms)", "ms"),
        Col("p50_ms", "p50 Latency(ms)", "ms", shown=False),
        Col("min_ms", "min Latency(ms)", "ms", shown=False),
        Col("max_ms", "max Latency(ms)", "ms", shown=False),
        Col("algbw_GBps", "tput_avg ({unit})", "bw"),
        Col("busbw_GBps", "busbw_avg ({unit})", "bw"),
        Col("dtype", "dtype", shown=False),
    ]
    cols += contract_cols(SUMMARY_KEYS, cols)
    if by_caller and not s.empty:  # each (op, caller) one block, in the order they first come
        block = s["op"].astype(str) + "\0" + s["caller"].astype(str)
        first = {k: i for i, k in reversed(list(enumerate(block)))}
        s = s.iloc[sorted(range(len(s)), key=lambda i: first[block.iloc[i]])]
    return Table(
        "summary",
        "Communication summary (per logical collective: fastest rank's latency)",
        cols,
        _rows(s, cols),
    )


def _rows(df: pd.DataFrame, cols: list[Col]) -> list[list]:
    if df.empty:
        return []
    have = [c.key for c in cols]
    frame = df.reindex(columns=have)
    return [list(r) for r in frame.itertuples(index=False)]


def vs_reference(result: Result, by_caller: bool = False) -> Table:
    vs = result.vs_reference(by_caller)
    cols = [
        Col("op", "op"),
        Col("bytes", "Message Size", "bytes"),
        Col("busbw_GBps", "busbw ({unit})", "bw"),
        Col("ref_busbw_GBps", "ref busbw ({unit})", "bw"),
        Col("pct_of_ref", "% of ref", "pct", 1),
        Col("group_size", "n", "int", shown=False),
        Col("busbw_vs_ref", "busbw / ref", "ratio", shown=False),
    ]
    if vs.empty:
        return Table("vs_reference", "", cols, [])
    vs = vs.assign(pct_of_ref=100 * vs["busbw_vs_ref"])
    return Table(
        "vs_reference",
        "Against the nccl-tests reference (same op, interpolated at the same size)",
        cols,
        _rows(vs, cols),
    )


def ranks(result: Result) -> Table:
    r = result.ranks
    cols = [
        Col("rank", "rank", "int"),
        Col("host", "host"),
        Col("calls", "calls", "int"),
        Col("bytes", "bytes", "bytes"),
        Col("comm_ms", "comm (ms)", "ms"),
        Col("wait_ms", "wait (ms)", "ms"),
        Col("elapsed_ms", "elapsed (ms)", "ms"),
        Col("comm_pct", "% comm", "pct"),
    ]
    return Table("ranks", "Per rank (mpitrace style)", cols, _rows(r, cols), min_med_max(r))


# the most ranks whose per-op rows the text and Markdown tables list (CSV and JSON: every rank)
RANK_OPS_SHOWN = 16


def rank_ops(result: Result) -> Table:
    """mpitrace's per-rank table by routine: calls, bytes and time per op and rank."""
    ro = result.rank_ops
    cols = [
        Col("rank", "rank", "int"),
        Col("op", "op"),
        Col("calls", "calls", "int"),
        Col("bytes", "bytes", "bytes"),
        Col("time_ms", "time (ms)", "ms"),
        Col("wait_ms", "wait (ms)", "ms"),
    ]
    ranks_seen = sorted(ro["rank"].unique()) if not ro.empty else []
    notes = [
        "time sums each call's execution (calls in flight together count each); "
        "wait is the part of it spent waiting for late ranks"
    ]
    shown = None
    if len(ranks_seen) > RANK_OPS_SHOWN:
        shown = int((ro["rank"] <= ranks_seen[RANK_OPS_SHOWN - 1]).sum())
        notes.append(
            f"{len(ranks_seen)} ranks: the first {RANK_OPS_SHOWN} are shown here; --format csv or json has every rank"
        )
    return Table("rank_ops", "Per rank and op (mpitrace style)", cols, _rows(ro, cols), notes, shown)


def min_med_max(ranks: pd.DataFrame) -> list[str]:
    """mpitrace's closing lines: which rank spent least / median / most time communicating. That
    time counts the waiting for late ranks, so the rank that communicates most is often the one
    that waits most, not the slow one: each line says how much of it was waiting."""
    if ranks.empty:
        return []
    s = ranks.sort_values(["comm_ms", "rank"]).reset_index(drop=True)
    picks = (("minimum", 0), ("median", (len(s) - 1) // 2), ("maximum", len(s) - 1))
    out = ["communication time per rank counts the time spent waiting for late ranks:"]
    for label, i in picks:
        wait = s.loc[i, "wait_ms"]
        of_it = "" if missing(wait) else f" ({wait:.3f} ms of it waiting)"
        out.append(
            f"  {label} communication time = {s.loc[i, 'comm_ms']:.3f} ms for rank {int(s.loc[i, 'rank'])}{of_it}"
        )
    return out


def overlap(result: Result) -> Table:
    ov = result.overlap
    per_rank = ov[ov["scope"] == "rank"] if not ov.empty else ov
    cols = [
        Col("rank", "rank", "int"),
        Col("comm_busy_ms", "comm busy (ms)", "ms"),
        Col("exposed_ms", "exposed (ms)", "ms"),
        Col("exposed_pct", "exposed %", "pct", 1),
        Col("calls", "calls", "int", shown=False),
    ]
    if per_rank.empty:
        return Table("overlap", "", cols, [])
    per_rank = per_rank.assign(comm_busy_ms=per_rank["comm_busy_ns"] / 1e6, exposed_ms=per_rank["exposed_ns"] / 1e6)
    return Table("overlap", "Exposed communication (not hidden by compute)", cols, _rows(per_rank, cols))


STEP_NOTES = [
    "step N begins at the N-th optimizer.step() (or a pipeline schedule's step(), or nsyscomm.step(N)); "
    "step 0 precedes the first",
    "(in a loop ending in optimizer.step(), step i is iteration i, and calls after the loop make one more step)",
    "where a process made none, a PyTorch profiler trace's ProfilerStep#N ranges number its steps",
    "comm and exposed are summed over ranks; comm counts the time spent waiting for late ranks",
]


def steps(result: Result) -> Table:
    st = result.step_rows
    cols = [
        Col("step", "step", "int"),
        Col("warmup", "warm-up", "flag", shown=False),
        Col("calls", "calls", "int"),
        Col("comm_ms", "comm (ms)", "ms"),
        Col("late_rank", "last to arrive", "int"),
        Col("late_ms", "late by (ms)", "ms"),
        Col("avg_skew_ms", "avg skew (ms)", "ms"),
        Col("max_skew_ms", "max skew (ms)", "ms"),
        Col("exposed_ms", "exposed (ms)", "ms"),
        Col("max_rank", "most comm (rank)", "int", shown=False),
        Col("max_rank_comm_ms", "its comm (ms)", "ms", shown=False),
    ]
    if st.empty:
        return Table("steps", "", cols, [])
    if st["warmup"].any():  # the column only where there is something to mark (CSV has it always)
        cols[1] = Col("warmup", "warm-up", "flag")
    return Table("steps", "Per step", cols, _rows(st, cols), list(STEP_NOTES))


def histogram(result: Result) -> Table:
    h = result.size_histogram
    cols = [
        Col("op", "op"),
        Col("size_range", "size range"),
        Col("bin_lo", "from", "bytes", shown=False),
        Col("bin_hi", "below", "bytes", shown=False),
        Col("calls", "#calls", "int"),
        Col("avg_bytes", "avg size", "bytes"),
        Col("total_ms", "time (ms)", "ms"),
    ]
    if h.empty:
        return Table("size_histogram", "", cols, [])
    rng = ["0" if r.bin_hi == 0 else f"[{human_bytes(r.bin_lo)}, {human_bytes(r.bin_hi)})" for r in h.itertuples()]
    return Table(
        "size_histogram",
        "Message sizes (power-of-two bins, mpitrace style)",
        cols,
        _rows(h.assign(size_range=rng), cols),
    )


def links(result: Result) -> Table:
    lk = result.link_metrics
    cols = [
        Col("op", "op"),
        Col("bytes", "size", "bytes"),
        Col("metric", "metric"),
        Col("calls", "#calls", "int"),
        Col("devices", "GPUs", "int"),
        Col("avg_value", "mean", "pct", 1),
        Col("max_value", "peak", "pct", 1),
        Col("covered_ms", "covered (ms)", "ms", shown=False),
    ]
    title = "Link throughput during collectives (nsys GPU metrics: time-weighted mean over the calls' GPU time)"
    return Table("link_metrics", title, cols, _rows(lk, cols))


def top_skew(result: Result, limit: int = 5) -> Table:
    top = result.top_skew(limit)
    cols = [
        Col("op", "op"),
        Col("bytes", "size", "bytes"),
        Col("group_seq", "group/seq"),
        Col("step", "step", "int"),
        Col("last_rank", "last rank", "int"),
        Col("skew_ms", "skew (ms)", "ms"),
        # the part of the skew not already counted at an earlier call on the communicator: the order
        Col("late_ms", "late (ms)", "ms"),
        Col("caller", "caller"),
        Col("group", "group", shown=False),
        Col("seq", "seq", "int", shown=False),
        Col("participants", "participants", "int", shown=False),
        Col("latency_ms", "latency (ms)", "ms", shown=False),
    ]
    if top.empty or top["skew_ms"].max() <= 0:
        return Table("top_skew", "", cols, [])
    gs = [f"{r.group if isinstance(r.group, str) else '-'}/{r.seq}" for r in top.itertuples()]
    return Table("top_skew", f"Top {limit} collectives by lateness", cols, _rows(top.assign(group_seq=gs), cols))


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
