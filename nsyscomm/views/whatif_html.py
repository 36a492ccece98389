"""The HTML report's what-if section: per step, the measured step time beside the replayed
`ideal` and `no_straggler` ones; the scenarios' table; the attribution bars (slowdown per rank,
op, DP rank, stage, op type). Reads only Result.what_if_analysis."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nsyscomm.views import html_scale
from nsyscomm.views.html_parts import _e, _svg_open, _table, _text, _y_grid
from nsyscomm.views.units import fmt, human_key

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result

SERIES = (("measured", "xfer"), ("no_straggler", "wait"), ("ideal", "exposed"))
ATTR_PER_DIMENSION = 8


def step_chart(rows: list[dict]) -> str | None:
    by = {r["scenario"]: r for r in rows}
    if not rows:
        return None
    steps = [s["step"] for s in rows[0]["steps"]]
    nan = float("nan")  # a step whose what-if is withheld has no bar
    series = [("measured", "xfer", [s.get("step_ms_before", nan) for s in rows[0]["steps"]])]
    for name, cls in SERIES[1:]:
        if name in by:
            series.append((name, cls, [s.get("step_ms_after", nan) for s in by[name]["steps"]]))
    n, k = len(steps), len(series)
    W, L, R, T, B = 900, 70, 20, 24, 46
    H = 300
    pw, ph = W - L - R, H - T - B
    warm = [bool(s.get("warmup")) for s in rows[0]["steps"]]
    tops = [max((vals[i] for _, _, vals in series if vals[i] == vals[i]), default=0.0) for i in range(n)]
    vmax = html_scale.steady_max(tops, warm)
    bw = pw / max(n, 1)
    out = [_svg_open(W, H, "step time measured and replayed")]
    for i, (name, cls, _) in enumerate(series):
        out.append(f'<rect x="{L + 150 * i}" y="4" width="12" height="12" class="{cls}"/>')
        out.append(_text(L + 150 * i + 16, 14, name, "start", "legend"))
    out += _y_grid(vmax, L, pw, T, ph)
    every = max(1, math.ceil(n / 20))
    for i, s in enumerate(steps):
        x = L + i * bw
        for j, (name, cls, vals) in enumerate(series):
            if vals[i] != vals[i]:
                continue
            h = min(max(vals[i], 0), vmax) / vmax * ph
            w = bw * 0.8 / k
            label = f"step {s}: {name} {fmt(vals[i])} ms"
            out.append(
                f'<rect x="{x + bw * 0.1 + j * w:.1f}" y="{T + ph - h:.1f}" width="{w:.1f}" height="{h:.1f}" '
                f'class="{cls}"><title>{_e(label)}</title></rect>'
            )
        out.append(html_scale.cut_mark(x + bw * 0.1, bw * 0.8, T, tops[i], vmax))
        if i % every == 0:
            label = "job" if s is None else html_scale.warm_label(s, warm[i])
            out.append(_text(x + bw / 2, T + ph + 16, label, "middle", "axis"))
    out.append(_text(L + pw / 2, H - 6, "step", "middle", "axis"))
    out.append(_text(14, T + ph / 2, "ms", "middle", "axis", f' transform="rotate(-90 14 {T + ph / 2:.1f})"'))
    out.append("</svg>")
    return "".join(out)


def attribution_bars(attr: list[dict]) -> str | None:
    rows = []
    for by in ("dp_rank", "stage", "optype", "rank", "op"):
        mine = sorted((a for a in attr if a["by"] == by), key=lambda a: -a["slowdown"])[:ATTR_PER_DIMENSION]
        rows += mine
    if not rows:
        return None
    W, L, R, row_h = 900, 330, 80, 18
    H = row_h * len(rows) + 10
    vmax = max(max(a["slowdown"] - 1.0 for a in rows), 1e-9)
    out = [_svg_open(W, H, "slowdown attributed to ranks and ops")]
    for i, a in enumerate(rows):
        y = 5 + i * row_h
        extra = max(a["slowdown"] - 1.0, 0.0)
        w = extra / vmax * (W - L - R)
        label = f"{a['by']} {human_key(str(a['key']))}"
        out.append(_text(L - 6, y + 12, label[:48], "end", "axis"))
        out.append(
            f'<rect x="{L}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" class="exposed">'
            f"<title>{_e(label)}: S = {a['slowdown']:.4f}</title></rect>"
        )
        out.append(_text(L + w + 4, y + 12, f"x{a['slowdown']:.3f}", "start", "axis"))
    out.append("</svg>")
    return "".join(out)


def section(result: Result) -> str | None:
    """The section's HTML, or None when nothing was replayed."""
    a = result.what_if_analysis
    rows = a["what_if"]
    parts = []
    chart = step_chart(rows)
    if chart:
        parts.append(chart)
        if any(r.get("warmup_steps") for r in rows):
            parts.append(f'<p class="note">{_e(html_scale.NOTE)}</p>')
        table = [
            [
                r["scenario"],
                (fmt(r["step_ms_before"]), r["step_ms_before"]),
                (fmt(r["step_ms_after"]), r["step_ms_after"]),
                (fmt(r["saved_ms"]), r["saved_ms"]),
                ("-" if r["slowdown"] is None else f"{r['slowdown']:.3f}", r["slowdown"] or 0),
            ]
            for r in rows
        ]
        parts.append(
            _table(
                ["scenario", "step ms measured", "step ms after", "saved ms per step", "slowdown"],
                table,
                numeric={1, 2, 3, 4},
            )
        )
    bars = attribution_bars(a["attribution"])
    if bars:
        parts.append("<h3>Slowdown attributed (ideal replay with only these operations as measured)</h3>" + bars)
    parts.append('<p class="note">' + "<br>".join(_e(n) for n in a["notes"]) + "</p>")
    return "".join(parts) if (chart or bars) else None
