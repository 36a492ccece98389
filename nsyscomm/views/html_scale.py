"""The per-step charts' scale without the warm-up steps: a warm-up step, often many times longer
than the steady ones, would flatten every other step to nothing. The scale is set by the
steady steps; a warm-up bar past it is cut at the top, marked, and labelled with its value."""

from __future__ import annotations

from collections.abc import Sequence

from nsyscomm.views.html_parts import _e, _nice_max, _text
from nsyscomm.views.units import fmt


def steady_max(totals: Sequence[float], warm: Sequence[bool]) -> float:
    """The y axis' top: the largest total of the steps that are not warm-up (of all, when every
    step is), rounded up."""
    steady = [v for v, w in zip(totals, warm) if not w and v == v]
    pool = steady or [v for v in totals if v == v]
    return _nice_max(max(pool, default=1.0) or 1.0)


def cut_mark(x: float, width: float, top: float, total: float, vmax: float) -> str:
    """For a bar past the scale: a mark at the plot's top with the bar's value ('' otherwise)."""
    if total <= vmax:
        return ""
    return (
        f'<rect x="{x:.1f}" y="{top - 3:.1f}" width="{width:.1f}" height="3" class="cut"/>'
        + _text(x + width / 2, top + 12, f"{fmt(total)} ms", "middle", "axis")
        + f"<title>{_e(f'warm-up: {fmt(total)} ms, past the scale')}</title>"
    )


def warm_label(step: object, warm: bool) -> str:
    return f"{step}w" if warm else str(step)


NOTE = (
    "w: a warm-up step (its setup calls, or a first step far slower than the later ones), left out "
    "of the scale: its bar is cut at the top and labelled."
)
