"""The HTML report's tables and the text around them: summary per (op, size), per-rank table,
arrival skew, exposed communication (from Result.overlap), top callers."""

from __future__ import annotations

import pandas as pd

from nsyscomm.views import findings as F
from nsyscomm.views.html_charts import step_bars
from nsyscomm.views.html_parts import (
    _e,
    _i,
    _n,
    _num,
    _size,
    _table,
)
from nsyscomm.views.units import fmt


def finding_table(table: F.Table) -> str:
    """A table of the summary's findings (nsyscomm.views.findings) with every column the CSV has,
    headed by the text view's labels: the HTML reads the same rows as the other formats."""
    at = {c.key: i for i, c in enumerate(table.cols)}
    cols = [c for c in table.cols if "html" not in F.ABSENT.get((table.name, c.key), ((), ""))[0]]
    numeric = {i for i, c in enumerate(cols) if c.kind != "text" and c.kind != "flag"}
    rows = []
    for r in table.rows:
        cells: list = []
        for c in cols:
            v = r[at[c.key]]
            shown = F.display(v, c)
            key = F.machine(v, c)
            cells.append((shown, "" if key is None else repr(key)) if c.kind not in ("text", "flag") else shown)
        rows.append(cells)
    return _table([F.header(c) for c in cols], rows, numeric=numeric)


def summary_section(table: F.Table) -> str:
    if not table.rows:
        return '<p class="note">No collective calls.</p>'
    return (
        finding_table(table)
        + '<p class="note">One row per (op, message size). count: logical collectives (a call matched across '
        "ranks by group and sequence number counts once); calls: summed over ranks. Latency of a logical "
        "collective: its fastest rank's duration, never the time its calls waited in their queue behind earlier "
        "calls (queued: their mean, beside it). busbw follows nccl-tests (factor of the communicator "
        "size n).</p>"
    )


def ranks_table(table: F.Table) -> str:
    return finding_table(table) if table.rows else ""


def skew_text(skew: dict) -> str:
    s = skew.get("straggler_rank")
    if s is None:
        return '<p class="note">No straggler: no rank arrived late enough to keep the others waiting.</p>'
    per = {p["rank"]: p for p in skew.get("per_rank", [])}
    p = per.get(s, {})
    return (
        f"<p><b>Straggler: rank {_e(s)}</b> kept the others waiting "
        f"{_e(fmt(skew.get('straggler_wait_caused_ms')))} ms in all; it arrived last in {_e(p.get('late_count'))} of "
        f"{_e(skew.get('instances'))} shared collectives (mean arrival delay "
        f"{_e(fmt(p.get('avg_arrival_delay_ms')))} ms).</p>"
    )


def exposed_section(overlap: pd.DataFrame | None, warmup: set | frozenset = frozenset()) -> str | None:
    """The exposed-communication section from Result.overlap (rows of scope 'rank', the whole
    capture, and 'step', per rank and step), or None without it."""
    if overlap is None:
        return None
    return _exposed_from_overlap(overlap, warmup)


def _exposed_from_overlap(df: pd.DataFrame, warmup: set | frozenset = frozenset()) -> str:
    if df.empty:
        return (
            '<p class="note">No call whose exposure can be told: none ran kernels to set against compute, '
            "and no asynchronous call's wait was seen.</p>"
        )
    parts = []
    st = df[(df["scope"] == "step") & df["step"].notna()]
    if not st.empty:
        d = pd.DataFrame(
            {
                "step": pd.to_numeric(st["step"], errors="coerce"),
                "exposed": pd.to_numeric(st["exposed_ns"], errors="coerce") / 1e6,
                "comm": pd.to_numeric(st["comm_busy_ns"], errors="coerce") / 1e6,
            }
        )
        agg = d.groupby("step").max().sort_index()  # the slowest rank bounds the step
        parts.append(step_bars(agg, warmup))
        parts.append(
            '<p class="note">Per step, the rank with the most exposed communication '
            "(and, behind it, the most communication time).</p>"
        )
    rk = df[df["scope"] == "rank"]
    if not rk.empty:
        rows = []
        for r in rk.itertuples():
            busy, ex = _num(r.comm_busy_ns), _num(r.exposed_ns)
            pct = _num(getattr(r, "exposed_pct", None))
            if pct is None and busy:
                pct = 100.0 * (ex or 0) / busy
            rows.append(
                [
                    _i(r.rank),
                    _i(r.calls) if hasattr(r, "calls") else "-",
                    _n(None if busy is None else busy / 1e6),
                    _n(None if ex is None else ex / 1e6),
                    _n(pct, 1),
                ]
            )
        parts.append(
            _table(["rank", "calls", "comm busy (ms)", "exposed (ms)", "exposed %"], rows, numeric={0, 1, 2, 3, 4})
        )
    return "".join(parts)


def callers_section(by_caller: pd.DataFrame, top: int = 20) -> str:
    d = by_caller[by_caller["caller"].notna()] if "caller" in by_caller.columns else by_caller.iloc[0:0]
    if d.empty:
        return (
            '<p class="note">No caller information: callers are recorded by the nsyscomm wrapper '
            "(<code>file:line function</code> of the call site).</p>"
        )
    rows = []
    for caller, g in d.groupby("caller", sort=False):
        total = pd.to_numeric(g["total_ms"], errors="coerce").sum()
        b = pd.to_numeric(g["bytes"], errors="coerce")
        cnt = pd.to_numeric(g["count"], errors="coerce")
        rows.append(
            (
                float(total),
                str(caller),
                ", ".join(sorted(set(map(str, g["op"])))),
                int(cnt.sum()),
                int(pd.to_numeric(g["calls"], errors="coerce").sum()),
                float((b.fillna(0) * cnt).sum()),
            )
        )
    rows.sort(key=lambda r: (-r[0], r[1]))
    grand = sum(r[0] for r in rows) or 1.0
    header = ["caller", "ops", "count", "calls", "bytes (per rank)", "total (ms)", "share"]
    cells = [
        [c, ops, (str(n), str(n)), (str(k), str(k)), _size(b), _n(t), (f"{100 * t / grand:.1f}%", repr(t))]
        for t, c, ops, n, k, b in rows[:top]
    ]
    more = f'<p class="note">{len(rows) - top} more caller(s) not shown.</p>' if len(rows) > top else ""
    return _table(header, cells, numeric={2, 3, 4, 5, 6}, cls="callers") + more
