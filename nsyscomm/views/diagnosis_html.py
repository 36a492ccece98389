"""The HTML report's diagnosis section: a per-step waterfall of the mean rank's step
time (compute, exposed transfer, waiting) beside the what-if bars, and the late arrivals'
causes. Reads only the Result (step_breakdown, what_if, late_by_rank)."""

from __future__ import annotations

import math

from nsyscomm.analyses.result import Result
from nsyscomm.views import html_scale
from nsyscomm.views.html_parts import _e, _svg_open, _table, _text, _y_grid
from nsyscomm.views.units import fmt

PARTS = (
    ("compute", "compute and other host time", "#9db4c0"),
    ("exposed", "exposed transfer", None),
    ("wait", "waiting for the last rank", None),
)


def waterfall(result: Result) -> str | None:
    """Stacked bars per step: the measured step time split into compute (the rest), exposed
    transfer and waiting, for the mean rank."""
    measured = next((r for r in result.what_if if r.get("steps")), None)
    br = result.step_breakdown
    if measured is None or br.empty:
        return None
    step_ms = {s["step"]: s["step_ms_before"] for s in measured["steps"] if "step_ms_before" in s}
    rows, over = [], []
    for r in br.itertuples():
        total = step_ms.get(int(r.step))
        if total is None:
            continue
        wait, exposed = max(r.wait_ms or 0.0, 0.0), max(r.exposed_ms or 0.0, 0.0)
        drawn = within_step(total, exposed, wait)
        if drawn != (exposed, wait):
            over.append((int(r.step), total, exposed, wait))
        rows.append((int(r.step), max(total - sum(drawn), 0.0), *drawn))
    if not rows:
        return None
    W, L, R, T, B, H = 900, 70, 20, 24, 46, 300
    pw, ph = W - L - R, H - T - B
    warm_steps = set(result.warmup["steps"])
    warm = [x[0] in warm_steps for x in rows]
    vmax = html_scale.steady_max([sum(x[1:]) for x in rows], warm)
    bw = pw / len(rows)
    out = [_svg_open(W, H, "step time: compute, exposed transfer, waiting")]
    for i, (cls, name, fill) in enumerate(PARTS):
        attr = f'fill="{fill}"' if fill else f'class="{cls}"'
        out.append(f'<rect x="{L + 230 * i}" y="4" width="12" height="12" {attr}/>')
        out.append(_text(L + 230 * i + 16, 14, name, "start", "legend"))
    out += _y_grid(vmax, L, pw, T, ph)
    every = max(1, math.ceil(len(rows) / 20))
    for i, (step, *vals) in enumerate(rows):
        x, y = L + i * bw + bw * 0.15, T + ph
        for (cls, name, fill), v in zip(PARTS, vals):
            h = min(v, max(y - T, 0.0) / ph * vmax) / vmax * ph  # a warm-up bar stops at the top
            y -= h
            attr = f'fill="{fill}"' if fill else f'class="{cls}"'
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw * 0.7:.1f}" height="{h:.1f}" {attr}>'
                f"<title>{_e(f'step {step}: {name} {fmt(v)} ms')}</title></rect>"
            )
        out.append(html_scale.cut_mark(x, bw * 0.7, T, sum(vals), vmax))
        if i % every == 0:
            out.append(_text(L + i * bw + bw / 2, T + ph + 16, html_scale.warm_label(step, warm[i]), "middle", "axis"))
    out.append(_text(L + pw / 2, H - 6, "step", "middle", "axis"))
    out.append(_text(14, T + ph / 2, "ms", "middle", "axis", f' transform="rotate(-90 14 {T + ph / 2:.1f})"'))
    out.append("</svg>")
    return "".join(out) + cut_note(over)


def within_step(total: float, exposed: float, wait: float) -> tuple[float, float]:
    """The exposed transfer and the waiting a step's bar draws: never more than the step itself
    (the mean rank's waiting and exposed time can pass its step time where asynchronous calls
    are waited for a step later, or queued calls overlap), exposed first, then waiting."""
    exposed_drawn = min(exposed, max(total, 0.0))
    return exposed_drawn, min(wait, max(total - exposed_drawn, 0.0))


def cut_note(over: list[tuple[int, float, float, float]], shown: int = 5) -> str:
    """The steps whose waiting and exposed time pass their step time: their bars stop at the step."""
    if not over:
        return ""
    named = "; ".join(
        f"step {s}: {fmt(e)} ms exposed and {fmt(w)} ms waiting in a {fmt(t)} ms step" for s, t, e, w in over[:shown]
    )
    more = f" and {len(over) - shown} more" if len(over) > shown else ""
    return (
        f'<p class="note">Cut to the step: {_e(named)}{more}. The mean rank\'s waiting and exposed time '
        "pass its step time there (calls waited for in a later step, or queued behind each other); "
        "each bar stops at its step.</p>"
    )


def section(result: Result) -> str | None:
    parts = []
    chart = waterfall(result)
    if chart:
        parts.append(chart)
    per = result.late_by_rank
    if not per.empty:
        rows = [
            [int(r.rank), r.cause, r.caller, int(r.count), (fmt(r.delay_ms), r.delay_ms)]
            for r in per.head(20).itertuples()
        ]
        parts.append(
            "<h3>Late arrivals by rank and cause</h3>"
            + _table(["rank", "cause", "caller", "late arrivals", "delay ms"], rows, numeric={0, 3, 4})
        )
    if not parts:
        return None
    parts.append(
        '<p class="note">Compute is the rest of the mean rank\'s step; causes and their model: docs/diagnosis.md.</p>'
    )
    return "".join(parts)
