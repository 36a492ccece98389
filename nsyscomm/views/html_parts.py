"""Small pieces of the HTML report shared by its sections (nsyscomm.views.html_report,
whatif_html, diagnosis_html): escaping, tables, SVG text and axes. Their own module so that the
sections import them without importing the report that imports the sections."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Collection
from typing import Any

import pandas as pd

from nsyscomm.views.units import fmt, human_bytes

TABLE_MAX_ROWS = 500


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _na(v: object) -> bool:
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _num(v: Any) -> float | None:
    if _na(v):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isinf(f) or math.isnan(f) else f


def json_for_script(obj: Any) -> str:
    """JSON safe inside <script>: no '</script>', no '<!--', no entity tricks."""
    s = json.dumps(obj, allow_nan=False, default=str)
    return (
        s.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


# ---------------------------------------------------------------- tables


def _table(
    header: list[str],
    rows: list[list],
    numeric: Collection[int] = frozenset(),
    caption: str | None = None,
    cls: str = "",
) -> str:
    """rows: list of cells; a cell is a value or (display, sort_value)."""
    out = [f'<table class="sortable {cls}">']
    if caption:
        out.append(f"<caption>{_e(caption)}</caption>")
    out.append(
        "<thead><tr>"
        + "".join(f'<th{" class=num" if i in numeric else ""} title="sort">{_e(h)}</th>' for i, h in enumerate(header))
        + "</tr></thead><tbody>"
    )
    for r in rows[:TABLE_MAX_ROWS]:
        cells = []
        for i, c in enumerate(r):
            disp, key = c if isinstance(c, tuple) else (c, None)
            attrs = ' class="num"' if i in numeric else ""
            if key is not None:
                attrs += f' data-v="{_e(key)}"'
            cells.append(f"<td{attrs}>{_e(disp)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    if len(rows) > TABLE_MAX_ROWS:
        out.append(f'<p class="note">{len(rows) - TABLE_MAX_ROWS} more row(s) not shown.</p>')
    return "".join(out)


def _n(v: object, digits: int = 3) -> tuple[str, str]:
    f = _num(v)
    return ("-", "") if f is None else (fmt(f, digits), repr(f))


def _i(v: object) -> tuple[str, str]:
    f = _num(v)
    return ("-", "") if f is None else (str(int(f)), str(int(f)))


def _size(v: object) -> tuple[str, str]:
    f = _num(v)
    return ("?", "") if f is None else (human_bytes(int(f)), str(int(f)))


def _s(v: object) -> str:
    return "-" if _na(v) else str(v)


def _svg_open(w: int, h: int, label: str) -> str:
    return (
        f'<svg class="chart" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="{_e(label)}" xmlns="http://www.w3.org/2000/svg">'
    )


def _text(x: float, y: float, s: object, anchor: str = "start", cls: str = "", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>{_e(s)}</text>'


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * exp >= v:
            return m * exp
    return 10 * exp


def _ticks(vmax: float, n: int = 5) -> list[float]:
    return [vmax * i / n for i in range(n + 1)]


def _tick_label(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == 0 else f"{v:.2g}"


def _y_grid(vmax: float, left: float, width: float, top: float, height: float) -> list[str]:
    """Horizontal grid lines and their labels for a bar chart whose y axis runs from 0 to vmax."""
    out = []
    for v in _ticks(vmax):
        y = top + height - v / vmax * height
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(_text(left - 6, y + 4, _tick_label(v), "end", "axis"))
    return out


# ---------------------------------------------------------------- bus bandwidth curve
