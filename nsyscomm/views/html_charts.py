"""The HTML report's charts, drawn as inline SVG (no script, no network): bus bandwidth against
message size, communication and waiting per rank, the arrival-skew heatmap, exposed
communication per step."""

from __future__ import annotations

import math

import pandas as pd

from nsyscomm.views import html_scale
from nsyscomm.views.html_parts import (
    _e,
    _na,
    _nice_max,
    _num,
    _svg_open,
    _text,
    _tick_label,
    _ticks,
    _y_grid,
)
from nsyscomm.views.units import fmt, human_bytes

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
HEATMAP_MAX_COLS = 240  # logical collectives per heatmap; more are averaged into bins


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
    x_lo, x_hi = lo - 0.5, hi + 0.5
    ymax = _nice_max(max([p[1] for v in pts.values() for p in v] + ([peak_busbw] if peak_busbw else [])) * 1.05)

    def X(b):
        return L + (math.log2(b) - x_lo) / (x_hi - x_lo) * pw

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


def step_bars(agg: pd.DataFrame, warmup: set | frozenset = frozenset()) -> str:
    steps = list(agg.index)
    n = len(steps)
    W, L, R, T, B = 900, 70, 20, 24, 46
    H = 300
    pw, ph = W - L - R, H - T - B
    vals = list(agg["exposed"].fillna(0))
    comm = list(agg["comm"].fillna(0)) if "comm" in agg.columns else None
    warm = [int(s) in warmup for s in steps]
    tops = [max(v, comm[i] if comm is not None else 0.0) for i, v in enumerate(vals)]
    vmax = html_scale.steady_max(tops, warm)
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
            h = min(comm[i], vmax) / vmax * ph
            out.append(
                f'<rect x="{x + bw * 0.1:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.8:.1f}" height="{h:.1f}" '
                f'class="xfer"><title>{_e(f"step {int(s)}: communication {fmt(comm[i])} ms")}</title></rect>'
            )
        h = min(vals[i], vmax) / vmax * ph
        out.append(
            f'<rect x="{x + bw * 0.25:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.5:.1f}" height="{h:.1f}" '
            f'class="exposed"><title>{_e(f"step {int(s)}: exposed {fmt(vals[i])} ms")}</title></rect>'
        )
        out.append(html_scale.cut_mark(x + bw * 0.1, bw * 0.8, T, tops[i], vmax))
        if i % every == 0:
            out.append(_text(x + bw / 2, T + ph + 16, html_scale.warm_label(int(s), warm[i]), "middle", "axis"))
    out.append(_text(L + pw / 2, H - 6, "step (slowest rank)", "middle", "axis"))
    out.append(_text(14, T + ph / 2, "ms", "middle", "axis", f' transform="rotate(-90 14 {T + ph / 2:.1f})"'))
    out.append("</svg>")
    return "".join(out)
