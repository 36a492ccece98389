"""A self-contained HTML report: one file, no network (inline CSS, inline SVG, inline script).

Sections: overview and warnings; summary per (op, size); bus bandwidth against message size
per op (the nccl-tests curve), with an optional peak line; per-rank communication and wait
bars with mpitrace's table; a rank x logical-collective arrival-skew heatmap; exposed
communication per step (only when the Result carries an ``overlap`` analysis); top callers.

Everything taken from reports (kernel names, NVTX strings, callers, paths, hosts) is
untrusted: it goes through ``html.escape``, and the JSON embedded in ``<script>`` has ``<``,
``>`` and ``&`` escaped. A Content-Security-Policy forbids every network load.
"""

from __future__ import annotations

import math

import pandas as pd

from nsyscomm import __version__
from nsyscomm.views.html_parts import (
    TABLE_MAX_ROWS,
    _e,
    _i,
    _n,
    _na,
    _nice_max,
    _num,
    _s,
    _size,
    _svg_open,
    _table,
    _text,
    _tick_label,
    _ticks,
    _y_grid,
    json_for_script,
)
from nsyscomm.views.units import fmt, human_bytes

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
HEATMAP_MAX_COLS = 240  # logical collectives per heatmap; more are averaged into bins


def summary_section(summary: pd.DataFrame) -> str:
    header = [
        "op",
        "message size",
        "n",
        "count",
        "calls",
        "ranks",
        "total (ms)",
        "avg (ms)",
        "p50 (ms)",
        "max (ms)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "dtype",
    ]
    rows = [
        [
            _s(r.op),
            _size(r.bytes),
            _i(r.group_size),
            _i(r.count),
            _i(r.calls),
            _i(r.ranks),
            _n(r.total_ms),
            _n(r.avg_ms),
            _n(r.p50_ms),
            _n(r.max_ms),
            _n(r.algbw_GBps, 2),
            _n(r.busbw_GBps, 2),
            _s(r.dtype),
        ]
        for r in summary.itertuples()
    ]
    if not rows:
        return '<p class="note">No collective calls.</p>'
    return (
        _table(header, rows, numeric=set(range(1, 12)))
        + '<p class="note">One row per (op, message size). count: logical collectives (a call matched across '
        "ranks by group and sequence number counts once); calls: summed over ranks. Latency of a logical "
        "collective: its fastest rank's duration. busbw follows nccl-tests (factor of the communicator "
        "size n).</p>"
    )


# ---------------------------------------------------------------- SVG helpers


def busbw_chart(summary: pd.DataFrame, peak_busbw: float | None = None) -> str:
    pts: dict[str, list[tuple[float, float, dict]]] = {}
    for r in summary.itertuples():
        b, bw = _num(r.bytes), _num(r.busbw_GBps)
        if b is None or bw is None or b <= 0:
            continue
        pts.setdefault(str(r.op), []).append((b, bw, {"count": _num(r.count), "avg_ms": _num(r.avg_ms)}))
    if not pts:
        note = (
            '<p class="note">No bandwidth to plot: message sizes are unknown. Sizes come from the nsyscomm '
            "wrapper's NVTX metadata (or NCCL's payloads, when exported with blobs).</p>"
        )
        if peak_busbw:
            note += f'<p class="note">Peak bus bandwidth given: {_e(fmt(peak_busbw, 1))} GB/s.</p>'
        return note
    W, H, L, R, T, B = 900, 380, 70, 150, 20, 50
    pw, ph = W - L - R, H - T - B
    xs = [p[0] for v in pts.values() for p in v]
    lo, hi = math.floor(math.log2(min(xs))), math.ceil(math.log2(max(xs)))
    if hi - lo < 2:
        lo, hi = lo - 1, hi + 1
    e_lo, e_hi = lo, hi  # labelled powers of two; the plot keeps half an octave either side
    lo, hi = lo - 0.5, hi + 0.5
    ymax = _nice_max(max([p[1] for v in pts.values() for p in v] + ([peak_busbw] if peak_busbw else [])) * 1.05)

    def X(b):
        return L + (math.log2(b) - lo) / (hi - lo) * pw

    def Y(v):
        return T + ph - v / ymax * ph

    out = [_svg_open(W, H, "bus bandwidth against message size")]
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" class="plotbg"/>')
    for v in _ticks(ymax):
        y = Y(v)
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(_text(L - 6, y + 4, _tick_label(v), "end", "axis"))
    step = max(1, math.ceil((e_hi - e_lo) / 12))
    for e in range(e_lo, e_hi + 1, step):
        x = X(2**e)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{T + ph}" class="grid"/>')
        out.append(_text(x, T + ph + 16, human_bytes(2**e).replace(".0 ", " "), "middle", "axis"))
    out.append(_text(L + pw / 2, H - 8, "message size (bytes, log scale)", "middle", "axis"))
    out.append(_text(16, T + ph / 2, "busbw (GB/s)", "middle", "axis", f' transform="rotate(-90 16 {T + ph / 2:.1f})"'))
    if peak_busbw:
        y = Y(peak_busbw)
        out.append(f'<line x1="{L}" x2="{L + pw}" y1="{y:.1f}" y2="{y:.1f}" class="peak"/>')
        out.append(_text(L + pw - 4, y - 5, f"peak {fmt(peak_busbw, 1)} GB/s", "end", "peaklabel"))
    for i, (op, p) in enumerate(sorted(pts.items())):
        color = PALETTE[i % len(PALETTE)]
        p.sort()
        if len(p) > 1:
            d = " ".join(f"{'M' if j == 0 else 'L'}{X(b):.1f},{Y(v):.1f}" for j, (b, v, _) in enumerate(p))
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        for b, v, info in p:
            tip = (
                f"{op} {human_bytes(int(b))}: busbw {v:.2f} GB/s, avg {fmt(info['avg_ms'])} ms, "
                f"{'' if info['count'] is None else int(info['count'])} logical collective(s)"
            )
            out.append(
                f'<circle cx="{X(b):.1f}" cy="{Y(v):.1f}" r="4" fill="{color}"><title>{_e(tip)}</title></circle>'
            )
        ly = T + 14 + 18 * i
        out.append(f'<rect x="{L + pw + 14}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        out.append(_text(L + pw + 32, ly + 1, op, "start", "legend"))
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------- per-rank bars


def rank_bars(ranks: pd.DataFrame, straggler: int | None) -> str:
    if ranks.empty:
        return '<p class="note">No ranks.</p>'
    rows = []
    for r in ranks.itertuples():
        comm = _num(r.comm_ms) or 0.0
        wait = min(max(_num(r.wait_ms) or 0.0, 0.0), comm)
        rows.append((int(r.rank), comm - wait, wait, _num(r.elapsed_ms), _num(r.comm_pct)))
    W, L, R, T, bar = 900, 90, 230, 26, 18
    H = T + len(rows) * (bar + 8) + 36
    pw = W - L - R
    vmax = _nice_max(max(c + w for _, c, w, _, _ in rows) or 1.0)
    out = [_svg_open(W, H, "communication and wait time per rank")]
    out.append(f'<rect x="{L + 2}" y="4" width="12" height="12" class="xfer"/>')
    out.append(_text(L + 18, 14, "transfer (comm minus wait)", "start", "legend"))
    out.append(f'<rect x="{L + 220}" y="4" width="12" height="12" class="wait"/>')
    out.append(_text(L + 236, 14, "waiting for other ranks", "start", "legend"))
    for v in _ticks(vmax):
        x = L + v / vmax * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{T}" y2="{H - 30}" class="grid"/>')
        out.append(_text(x, H - 16, _tick_label(v), "middle", "axis"))
    out.append(_text(L + pw / 2, H - 2, "time (ms)", "middle", "axis"))
    for i, (rank, xfer, wait, elapsed, pct) in enumerate(rows):
        y = T + i * (bar + 8)
        cls = "axis strag" if rank == straggler else "axis"
        out.append(_text(L - 8, y + bar - 4, f"rank {rank}" + (" *" if rank == straggler else ""), "end", cls))
        w1, w2 = xfer / vmax * pw, wait / vmax * pw
        tip = f"rank {rank}: communication {fmt(xfer + wait)} ms (transfer {fmt(xfer)} ms, wait {fmt(wait)} ms)" + (
            f", elapsed {fmt(elapsed)} ms" if elapsed is not None else ""
        )
        out.append(
            f"<g><title>{_e(tip)}</title>"
            f'<rect x="{L}" y="{y}" width="{w1:.1f}" height="{bar}" class="xfer"/>'
            f'<rect x="{L + w1:.1f}" y="{y}" width="{w2:.1f}" height="{bar}" class="wait"/></g>'
        )
        label = f"{fmt(xfer + wait)} ms" + (f" ({fmt(pct, 1)}% of {fmt(elapsed, 1)} ms)" if pct is not None else "")
        out.append(_text(L + w1 + w2 + 6, y + bar - 4, label, "start", "axis"))
    out.append("</svg>")
    return "".join(out)


def ranks_table(ranks: pd.DataFrame) -> str:
    header = ["rank", "host", "calls", "bytes", "comm (ms)", "wait (ms)", "elapsed (ms)", "% comm"]
    rows = [
        [
            _i(r.rank),
            _s(r.host),
            _i(r.calls),
            _size(r.bytes),
            _n(r.comm_ms),
            _n(r.wait_ms),
            _n(r.elapsed_ms),
            _n(r.comm_pct, 2),
        ]
        for r in ranks.itertuples()
    ]
    return _table(header, rows, numeric={0, 2, 3, 4, 5, 6, 7}) if rows else ""


# ---------------------------------------------------------------- skew heatmap


def _heat_color(t: float) -> str:
    """0 -> pale yellow, 1 -> dark red (a sequential scale readable in print)."""
    t = min(max(t, 0.0), 1.0)
    stops = (
        (0.0, (255, 255, 229)),
        (0.25, (254, 217, 142)),
        (0.5, (254, 153, 41)),
        (0.75, (217, 72, 1)),
        (1.0, (127, 39, 4)),
    )
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if t <= b:
            u = (t - a) / (b - a) if b > a else 0
            return "#" + "".join(f"{round(x + (y - x) * u):02x}" for x, y in zip(ca, cb))
    return "#7f2704"


def skew_heatmap(matrix: pd.DataFrame) -> str:
    df = matrix
    if df.empty:
        return '<p class="note">No collective was seen on two ranks or more: no arrival skew to show.</p>'
    keys = list(dict.fromkeys(zip(df["group"].astype(object).where(df["group"].notna(), None), df["op"], df["seq"])))
    col_of = {k: i for i, k in enumerate(keys)}
    ncol_raw = len(keys)
    binned = ncol_raw > HEATMAP_MAX_COLS
    per_bin = math.ceil(ncol_raw / HEATMAP_MAX_COLS) if binned else 1
    ncol = math.ceil(ncol_raw / per_bin)
    ranks = sorted(int(r) for r in df["rank"].unique())
    row_of = {r: i for i, r in enumerate(ranks)}
    acc: dict[tuple[int, int], list] = {}
    info: dict[int, list] = {}
    for r in df.itertuples():
        k = (None if _na(r.group) else r.group, r.op, r.seq)
        c = col_of[k] // per_bin
        acc.setdefault((row_of[int(r.rank)], c), []).append(_num(r.delay_ms) or 0.0)
        if c not in info:
            info[c] = [k, None if _na(r.step) else int(r.step)]
    vals = {k: sum(v) / len(v) for k, v in acc.items()}
    vmax = max(vals.values()) if vals else 0.0
    L, T, R = 70, 10, 20
    W = 900
    cw = max(2.0, min(24.0, (W - L - R) / ncol))
    ch = 22 if len(ranks) <= 16 else max(6, 352 // len(ranks))
    pw = cw * ncol
    H = T + ch * len(ranks) + 66
    out = [_svg_open(W, H, "arrival skew heatmap")]
    for rank, i in row_of.items():
        out.append(_text(L - 6, T + i * ch + ch / 2 + 4, f"rank {rank}", "end", "axis"))
    for (i, c), v in vals.items():
        k, step = info[c]
        what = (
            (
                f"{k[1]} seq {k[2]}"
                + (f" group {k[0]}" if k[0] is not None else "")
                + (f" step {step}" if step is not None else "")
            )
            if not binned
            else f"collectives {c * per_bin + 1}-{min((c + 1) * per_bin, ncol_raw)} (mean)"
        )
        tip = f"rank {ranks[i]}, {what}: arrived {v:.3f} ms after the first rank"
        out.append(
            f'<rect x="{L + c * cw:.2f}" y="{T + i * ch}" width="{cw + 0.3:.2f}" height="{ch}" '
            f'fill="{_heat_color(v / vmax if vmax > 0 else 0)}"><title>{_e(tip)}</title></rect>'
        )
    out.append(f'<rect x="{L}" y="{T}" width="{pw:.1f}" height="{ch * len(ranks)}" class="frame"/>')
    yb = T + ch * len(ranks)
    out.append(
        _text(
            L,
            yb + 16,
            "logical collectives in order of first arrival"
            + (f" ({per_bin} per column, averaged)" if binned else f" ({ncol_raw})"),
            "start",
            "axis",
        )
    )
    # legend: the colour scale
    gx, gy, gw = L, yb + 30, 240
    for j in range(48):
        out.append(
            f'<rect x="{gx + j * gw / 48:.1f}" y="{gy}" width="{gw / 48 + 0.5:.1f}" height="10" '
            f'fill="{_heat_color(j / 47)}"/>'
        )
    out.append(_text(gx, gy + 24, "0 ms", "start", "axis"))
    out.append(_text(gx + gw, gy + 24, f"{vmax:.3f} ms late", "end", "axis"))
    out.append(_text(gx + gw + 12, gy + 9, "arrival delay behind the first rank", "start", "axis"))
    out.append("</svg>")
    return "".join(out)


def skew_text(skew: dict) -> str:
    s = skew.get("straggler_rank")
    if s is None:
        return '<p class="note">No straggler: no rank arrived last more often than the others.</p>'
    per = {p["rank"]: p for p in skew.get("per_rank", [])}
    p = per.get(s, {})
    return (
        f"<p><b>Straggler: rank {_e(s)}</b> arrived last in {_e(p.get('late_count'))} of "
        f"{_e(skew.get('instances'))} shared collectives (mean arrival delay "
        f"{_e(fmt(p.get('avg_arrival_delay_ms')))} ms).</p>"
    )


# ---------------------------------------------------------------- exposed communication (overlap)


def _overlap_frame(overlap) -> pd.DataFrame | None:
    if overlap is None:
        return None
    if callable(overlap) and not isinstance(overlap, pd.DataFrame):
        overlap = overlap()
    if isinstance(overlap, pd.DataFrame):
        return overlap
    if isinstance(overlap, dict):
        for key in ("per_step", "steps", "by_step", "per_rank", "ranks", "rows"):
            v = overlap.get(key)
            if isinstance(v, pd.DataFrame):
                return v
            if isinstance(v, list) and v and isinstance(v[0], dict):
                return pd.DataFrame(v)
        return pd.DataFrame([overlap])
    if isinstance(overlap, list) and (not overlap or isinstance(overlap[0], dict)):
        return pd.DataFrame(overlap)
    return None


def _to_ms(df: pd.DataFrame, col: str) -> pd.Series:
    s = pd.to_numeric(df[col], errors="coerce")
    return s / 1e6 if col.endswith("_ns") else s


def exposed_section(overlap) -> str | None:
    """The exposed-communication section, or None when the Result has no overlap analysis."""
    df = _overlap_frame(overlap)
    if df is None:
        return None
    if {"scope", "rank", "step", "comm_busy_ns", "exposed_ns"} <= set(map(str, df.columns)):
        return _exposed_from_overlap(df)
    return _exposed_generic(df)


def _exposed_from_overlap(df: pd.DataFrame) -> str:
    """nsyscomm.api.Result.overlap: rows of scope 'rank' (whole capture) and 'step' (per rank and step)."""
    if df.empty:
        return (
            '<p class="note">No GPU communication to set against compute (CPU-synchronous backends '
            "have nothing to hide behind).</p>"
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
        parts.append(_step_bars(agg))
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
            _table(["rank", "GPU calls", "comm busy (ms)", "exposed (ms)", "exposed %"], rows, numeric={0, 1, 2, 3, 4})
        )
    return "".join(parts)


def _exposed_generic(df: pd.DataFrame) -> str:
    parts = []
    exp_cols = [c for c in df.columns if "exposed" in str(c).lower()]
    comm_cols = [c for c in df.columns if str(c).lower() in ("comm_ns", "comm_ms", "communication_ms", "comm_total_ms")]
    if "step" in df.columns and exp_cols and not df.empty:
        ex = exp_cols[0]
        d = pd.DataFrame({"step": pd.to_numeric(df["step"], errors="coerce"), "exposed": _to_ms(df, ex)})
        if comm_cols:
            d["comm"] = _to_ms(df, comm_cols[0])
        d = d.dropna(subset=["step"])
        if not d.empty:
            agg = d.groupby("step").max().sort_index()  # the slowest rank bounds the step
            parts.append(_step_bars(agg))
    if df.empty:
        parts.append('<p class="note">The overlap analysis found nothing to report.</p>')
    else:
        header = [str(c) for c in df.columns]
        rows = []
        for rec in df.head(TABLE_MAX_ROWS).itertuples(index=False):
            row = []
            for v in rec:
                f = _num(v) if not isinstance(v, str) else None
                row.append(
                    (
                        fmt(f, 3)
                        if f is not None and not float(f).is_integer()
                        else str(int(f))
                        if f is not None
                        else _s(v),
                        "" if f is None else repr(f),
                    )
                )
            rows.append(row)
        num = {i for i, c in enumerate(df.columns) if pd.api.types.is_numeric_dtype(df[c])}
        parts.append(_table(header, rows, numeric=num))
    return "".join(parts)


def _step_bars(agg: pd.DataFrame) -> str:
    steps = list(agg.index)
    n = len(steps)
    W, L, R, T, B = 900, 70, 20, 24, 46
    H = 300
    pw, ph = W - L - R, H - T - B
    vals = list(agg["exposed"].fillna(0))
    comm = list(agg["comm"].fillna(0)) if "comm" in agg.columns else None
    vmax = _nice_max(max(vals + (comm or [])) or 1.0)
    bw = pw / max(n, 1)
    out = [_svg_open(W, H, "exposed communication per step")]
    if comm is not None:
        out.append(f'<rect x="{L}" y="4" width="12" height="12" class="xfer"/>')
        out.append(_text(L + 16, 14, "communication", "start", "legend"))
        out.append(f'<rect x="{L + 140}" y="4" width="12" height="12" class="exposed"/>')
        out.append(_text(L + 156, 14, "exposed (not overlapped with compute)", "start", "legend"))
    out += _y_grid(vmax, L, pw, T, ph)
    every = max(1, math.ceil(n / 20))
    for i, s in enumerate(steps):
        x = L + i * bw
        if comm is not None:
            h = comm[i] / vmax * ph
            out.append(
                f'<rect x="{x + bw * 0.1:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.8:.1f}" height="{h:.1f}" '
                f'class="xfer"><title>{_e(f"step {int(s)}: communication {fmt(comm[i])} ms")}</title></rect>'
            )
        h = vals[i] / vmax * ph
        out.append(
            f'<rect x="{x + bw * 0.25:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.5:.1f}" height="{h:.1f}" '
            f'class="exposed"><title>{_e(f"step {int(s)}: exposed {fmt(vals[i])} ms")}</title></rect>'
        )
        if i % every == 0:
            out.append(_text(x + bw / 2, T + ph + 16, str(int(s)), "middle", "axis"))
    out.append(_text(L + pw / 2, H - 6, "step (slowest rank)", "middle", "axis"))
    out.append(_text(14, T + ph / 2, "ms", "middle", "axis", f' transform="rotate(-90 14 {T + ph / 2:.1f})"'))
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------- top callers


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


# ---------------------------------------------------------------- page

_CSS = """
:root{--fg:#1d2330;--muted:#5b6472;--line:#d8dde5;--bg:#fff;--card:#f6f8fb;--accent:#1f77b4}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
 background:var(--bg);margin:0;padding:24px 32px;max-width:1180px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub{color:var(--muted);margin:0 0 12px;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:var(--muted);font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:3px 10px;text-align:left;vertical-align:top}
th{background:var(--card);cursor:pointer;user-select:none;white-space:nowrap}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.callers td:first-child{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all;max-width:520px}
.note{color:var(--muted);font-size:12.5px;max-width:900px}
.warn{background:#fff8e1;border:1px solid #f0d48a;border-radius:6px;padding:8px 14px}
.warn li{margin:2px 0}
svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}
svg text{font:11px system-ui,-apple-system,"DejaVu Sans",sans-serif;fill:#333}
svg .legend{font-size:12px}svg .strag{font-weight:bold;fill:#b22}
.plotbg{fill:#fbfcfe;stroke:#c9ced8}.grid{stroke:#e3e7ee;stroke-width:1}.frame{fill:none;stroke:#9aa3b2}
.peak{stroke:#d62728;stroke-width:1.5;stroke-dasharray:6 4}.peaklabel{fill:#d62728}
.xfer{fill:#4c8ed0}.wait{fill:#f2a33a}.exposed{fill:#d62728}
footer{margin-top:36px;color:var(--muted);font-size:12px}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
"""

# Recorded into <html data-errors="..."> so that a headless browser's --dump-dom shows them; must run first.
_ERROR_HOOK = """
(function(){var d=document.documentElement;d.setAttribute('data-errors','');
function rec(m){var p=d.getAttribute('data-errors');d.setAttribute('data-errors',(p?p+' | ':'')+m);}
window.addEventListener('error',function(e){rec(e.message?('error: '+e.message+' @'+(e.lineno||0)):
 ('load failed: '+((e.target&&(e.target.src||e.target.href))||'?')));},true);
window.addEventListener('unhandledrejection',function(e){rec('rejection: '+e.reason);});
document.addEventListener('securitypolicyviolation',function(e){rec('csp: '+e.blockedURI);});
var ce=console.error;console.error=function(){rec('console: '+Array.prototype.join.call(arguments,' '));
 return ce.apply(console,arguments);};})();
"""

_MAIN_JS = """
(function(){
var data=JSON.parse(document.getElementById('nsyscomm-data').textContent);
window.nsyscomm=data;
function key(td){var v=td.getAttribute('data-v');if(v!==null&&v!==''){var f=parseFloat(v);if(!isNaN(f))return f;}
 return td.textContent;}
Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(t){
 var ths=t.tHead?t.tHead.rows[0].cells:[];
 Array.prototype.forEach.call(ths,function(th,i){th.addEventListener('click',function(){
  var asc=!th.classList.contains('sorted-asc');
  Array.prototype.forEach.call(ths,function(h){h.classList.remove('sorted-asc','sorted-desc');});
  th.classList.add(asc?'sorted-asc':'sorted-desc');
  var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
  rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);
   if(typeof x==='number'&&typeof y==='number')return asc?x-y:y-x;
   x=String(x);y=String(y);return asc?x.localeCompare(y):y.localeCompare(x);});
  rows.forEach(function(r){body.appendChild(r);});});});});
document.documentElement.setAttribute('data-ready', String(data.summary.length>=0 ? 1 : 0));
})();
"""

_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
)


def _data_document(result) -> dict:
    """The JSON output contract (what `summarize --format json` prints), embedded for scripts."""
    from nsyscomm.views import json_out

    try:
        return json_out.document(result)
    except AttributeError:  # a Result without some analysis (e.g. no overlap): the core tables
        return {
            "schema": 1,
            "tool": "nsyscomm",
            "version": __version__,
            "reports": list(result.reports),
            "summary": json_out.records(result.summarize(by_caller=False), json_out.SUMMARY_KEYS),
            "ranks": json_out.records(result.ranks, json_out.RANK_KEYS),
            "skew": result.skew,
            "warnings": list(result.warnings),
        }


def render(result, *, peak_busbw: float | None = None, title: str | None = None) -> str:
    summary = result.summarize(by_caller=False)
    by_caller = result.summarize(by_caller=True)
    ranks = result.ranks
    skew = result.skew
    warnings = list(result.warnings)
    overlap_html = None
    try:
        overlap_html = exposed_section(getattr(result, "overlap", None))
    except Exception as e:  # the page still renders without this section
        warnings.append(f"exposed communication not shown: the overlap analysis failed ({type(e).__name__}: {e})")
    n_calls = result.n_calls
    reports = list(result.reports)
    title = title or ("nsyscomm report: " + (", ".join(reports) if len(reports) <= 3 else f"{len(reports)} reports"))
    total_comm = _num(pd.to_numeric(ranks["comm_ms"], errors="coerce").sum()) if len(ranks) else None
    total_wait = _num(pd.to_numeric(ranks["wait_ms"], errors="coerce").sum()) if len(ranks) else None
    logical = result.n_logical
    cards = [
        ("collective calls", str(n_calls)),
        ("logical collectives", str(logical)),
        ("ranks", str(len(ranks))),
        ("communication (ms, all ranks)", fmt(total_comm)),
        ("waiting (ms, all ranks)", fmt(total_wait)),
        ("straggler", "-" if skew.get("straggler_rank") is None else f"rank {skew['straggler_rank']}"),
    ]
    data = _data_document(result)
    data["peak_busbw_GBps"] = peak_busbw

    sections = []
    if warnings:
        sections.append(
            '<div class="warn"><b>Warnings</b><ul>' + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul></div>"
        )
    sections.append('<h2 id="summary">Summary per operation and message size</h2>' + summary_section(summary))
    sections.append(
        '<h2 id="busbw">Bus bandwidth against message size</h2>'
        + busbw_chart(summary, peak_busbw)
        + '<p class="note">One curve per op, as nccl-tests draws it: busbw = message size / latency '
        "x the op's factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, "
        "all_to_all; 1 for broadcast, reduce, send, recv)."
        + (" The dashed line is the peak given with --peak-busbw." if peak_busbw else "")
        + "</p>"
    )
    sections.append(
        '<h2 id="ranks">Communication and waiting per rank</h2>'
        + rank_bars(ranks, skew.get("straggler_rank"))
        + ranks_table(ranks)
        + '<p class="note">wait: the part of a call beyond its logical collective\'s latency (the '
        "fastest rank's duration), i.e. time spent waiting for the other ranks to arrive. "
        "* marks the straggler.</p>"
    )
    sections.append(
        '<h2 id="skew">Arrival skew: rank x collective</h2>'
        + skew_text(skew)
        + skew_heatmap(result.arrival_matrix)
        + '<p class="note">Each cell: how long after the first rank this rank started the collective. '
        "A row that stays dark is a late rank; a dark column is one slow step.</p>"
    )
    if overlap_html is not None:
        sections.append(
            '<h2 id="exposed">Exposed communication (not hidden behind compute)</h2>'
            + overlap_html
            + '<p class="note">Exposed: communication time not overlapped by compute kernels.</p>'
        )
    links = getattr(result, "link_metrics", None)
    if links is not None and not links.empty:
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
        sections.append(
            '<h2 id="links">Link throughput during collectives</h2>'
            + _table(["op", "size", "metric", "calls", "GPUs", "mean", "peak"], rows, numeric={1, 3, 4, 5, 6})
            + '<p class="note">nsys GPU metrics (--gpu-metrics-devices): each link counter\'s samples '
            "weighed by the time they share with the calls' kernels on the same GPU.</p>"
        )
    from nsyscomm.views import (
        diagnosis_html,  # why late, step waterfall (issue 21)
        whatif_html,  # what-if replay (issue 23)
    )

    diagnosis_section = diagnosis_html.section(result)
    if diagnosis_section:
        sections.append(
            '<h2 id="diagnosis">Diagnosis: where each step goes, who is late and why</h2>' + diagnosis_section
        )
    whatif_section = whatif_html.section(result)
    if whatif_section:
        sections.append('<h2 id="whatif">What-if: step time measured and replayed</h2>' + whatif_section)
    sections.append('<h2 id="callers">Top callers</h2>' + callers_section(by_caller))

    page = f"""<!DOCTYPE html>
<html lang="en" data-errors="">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(_CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="nsyscomm {_e(__version__)}">
<title>{_e(title)}</title>
<script>{_ERROR_HOOK}</script>
<style>{_CSS}</style>
</head>
<body>
<h1>{_e(title)}</h1>
<p class="sub">{_e(", ".join(reports))}</p>
<div class="cards">{"".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in cards)}</div>
{"".join(sections)}
<footer>Generated by nsyscomm {_e(__version__)}. The data of this page (JSON output contract, schema
{_e(data.get("schema"))}) is embedded in <code>script#nsyscomm-data</code>.</footer>
<script type="application/json" id="nsyscomm-data">{json_for_script(data)}</script>
<script>{_MAIN_JS}</script>
</body>
</html>
"""
    return page
