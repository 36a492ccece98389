"""Every finding of a summary, made once for every format, so that the formats never disagree: the
tables and the lines of the text view, in order, as data. text.py draws them as rich tables,
tables.py as Markdown and as one CSV, each in its own idiom, so no format drops a finding and a
figure reads alike in all of them. Values stay raw here; `display` formats a cell for people
(sizes human-readable, bandwidth in the chosen unit) and `machine` for a CSV (integers as
integers, times rounded to the nanosecond the data holds, bandwidth in GB/s as the JSON has it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nsyscomm.analyses.invariants import lines as invariant_lines
from nsyscomm.analyses.result import Result
from nsyscomm.capture.run_folder import OWN_OUTPUT
from nsyscomm.views import set_aside
from nsyscomm.views.units import DEFAULT_UNITS, bandwidth, fmt, human_bytes, unit_label


@dataclass
class Col:
    key: str  # machine name: the CSV column, the JSON's key where it has one
    label: str  # the header people read (text, Markdown)
    kind: str = "text"  # text, int, ms, bytes, bw, pct
    digits: int | None = None  # decimals shown to people (default: the kind's)
    shown: bool = True  # False: in the CSV only (the text and Markdown tables keep DeepSpeed's columns)


@dataclass
class Table:
    name: str  # the CSV's `table` value
    title: str
    cols: list[Col]
    rows: list[list]
    notes: list[str] = field(default_factory=list)  # lines under the table


@dataclass
class Lines:
    name: str  # the CSV's `table` value: diagnosis, hang, nccl, straggler, what_if, withheld, warning, note
    title: str | None
    lines: list[str]


Block = Table | Lines


def missing(v: Any) -> bool:
    return (
        v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or (not isinstance(v, str) and pd.isna(v))
    )


def header(col: Col, units: str = DEFAULT_UNITS) -> str:
    """The column's header for people, a bandwidth's in the chosen unit."""
    return col.label.replace("{unit}", unit_label(units))


def display(v: Any, col: Col, units: str = DEFAULT_UNITS) -> str:
    """A cell for people: sizes human-readable, bandwidth in `units`, times in ms to the µs."""
    if col.kind == "bytes":
        return human_bytes(None if missing(v) else v)
    if missing(v):
        return "-"
    if col.kind == "int":
        return str(int(v))
    if col.kind == "ms":
        return fmt(float(v), 3 if col.digits is None else col.digits)
    if col.kind == "bw":
        return fmt(bandwidth(float(v), units), 2)
    if col.kind == "pct":
        return fmt(float(v), 2 if col.digits is None else col.digits)
    return str(v)


def machine(v: Any, col: Col) -> Any:
    """A cell for a CSV: counts and sizes as integers, times in ms to the ns, bandwidth in GB/s
    to the MB/s, percentages to a hundredth; missing values empty."""
    if missing(v):
        return None
    if col.kind in ("int", "bytes"):
        return int(v)
    if col.kind == "ms":
        return round(float(v), 6)
    if col.kind in ("bw", "pct"):
        return round(float(v), 3 if col.kind == "bw" else 2)
    return v


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
    return [Lines("warning", None, list(result.warnings)), Lines("note", None, skipped_lines(result))]


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
        Col("p50_ms", "p50 Latency(ms)", "ms", shown=False),
        Col("max_ms", "max Latency(ms)", "ms", shown=False),
        Col("algbw_GBps", "tput_avg ({unit})", "bw"),
        Col("busbw_GBps", "busbw_avg ({unit})", "bw"),
        Col("dtype", "dtype", shown=False),
    ]
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
    st = result.steps
    cols = [
        Col("step", "step", "int"),
        Col("warmup", "warm-up", "text", shown=False),
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
    ov = result.overlap
    exposed = ov[ov["scope"] == "step"].groupby("step")["exposed_ns"].sum() / 1e6 if not ov.empty else pd.Series()
    st = st.assign(exposed_ms=st["step"].map(exposed) if len(exposed) else None)
    warm = set_aside.warmup_steps(result)
    st = st.assign(warmup=["warm-up" if s in warm else "" for s in st["step"]])
    if warm:  # the column only where there is something to mark (CSV has it always)
        cols[1] = Col("warmup", "warm-up", "text")
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
        Col("caller", "caller"),
    ]
    if top.empty or top["skew_ms"].max() <= 0:
        return Table("top_skew", "", cols, [])
    gs = [f"{r.group if isinstance(r.group, str) else '-'}/{r.seq}" for r in top.itertuples()]
    return Table("top_skew", f"Top {limit} collectives by arrival skew", cols, _rows(top.assign(group_seq=gs), cols))


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
