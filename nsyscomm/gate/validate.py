"""The gate's edge: a run document is checked once, where it enters, for everything the
comparison reads. A value the gate cannot compare (NaN, infinity, a string, a number too large
for a float, a row of unknown shape) is an InputError naming the file, the field and the fix, so
that a corrupted baseline or run can never pass by being skipped: a metric the comparison drops
silently is a regression let through."""

from __future__ import annotations

import math

from nsyscomm.errors import InputError
from nsyscomm.gate.metrics import FIX_BASELINE, METRICS, SECTION_FIELDS

# The largest magnitude of a compared number: past it, sums and ratios lose every digit that
# matters (a count of 10^18 calls or a latency of 10^18 ms is no measurement)
MAX_VALUE = 1e18
# Fields of a summary row that are counts (integers >= 0) and the other numbers the gate reads
_COUNTS = ("bytes", "count", "calls", "ranks", "group_size")
_NUMBERS = tuple(
    dict.fromkeys(
        ["total_ms", "avg_ms", "p50_ms", "min_ms", "max_ms", "algbw_GBps", "busbw_GBps"]
        + [m.name for m in METRICS if m.scope == "key" and m.name not in _COUNTS]
    )
)
_TEXTS = ("dtype", "caller")


def _shown(v: object) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:40] + "…"


def _bad(where: str, what: str, v: object, want: str) -> InputError:
    return InputError(f"{where}: {what} = {_shown(v)}, not {want}; {FIX_BASELINE}")


def number(v: object, where: str, what: str, count: bool = False) -> None:
    """v is None or a finite number within MAX_VALUE (count: an integer >= 0), else InputError."""
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(where, what, v, "a number")
    if isinstance(v, int) and abs(v) > MAX_VALUE:  # before float(): 400 digits overflow it
        raise _bad(where, what, v, f"a number below {MAX_VALUE:.0e}")
    if not math.isfinite(v):
        raise _bad(where, what, v, "a finite number")
    if abs(v) > MAX_VALUE:
        raise _bad(where, what, v, f"a number below {MAX_VALUE:.0e}")
    if count and (v < 0 or v != int(v)):
        raise _bad(where, what, v, "a count (an integer >= 0)")


def summary_rows(rows: list[dict], where: str, what: str) -> None:
    """Every row of a summary list: an 'op' name, a count of calls, and numbers the gate compares."""
    for i, r in enumerate(rows):
        at = f"{what}[{i}]"
        if not r.get("op"):
            raise InputError(f"{where}: {at} has an empty 'op'; {FIX_BASELINE}")
        if r.get("calls") is None:
            raise InputError(f"{where}: {at} has no 'calls', not a summary row nsyscomm writes; {FIX_BASELINE}")
        for k in _COUNTS:
            number(r.get(k), where, f"{at}.{k}", count=True)
        for k in _NUMBERS:
            number(r.get(k), where, f"{at}.{k}")
        for k in _TEXTS:
            if r.get(k) is not None and not isinstance(r[k], str):
                raise _bad(where, f"{at}.{k}", r[k], "a string")


def sections(doc: dict, where: str) -> None:
    """The per-rank sections the rank and job metrics read: a list of rows (or an object holding
    them under per_rank/ranks), each with an integer rank and finite numbers."""
    for section, fld in sorted(SECTION_FIELDS):
        sec = doc.get(section)
        if sec is None:
            continue
        if isinstance(sec, dict):
            number(sec.get(fld), where, f"{section}.{fld}")
            held = [k for k in ("per_rank", "ranks") if sec.get(k) is not None]
            rows, name = (sec[held[0]], f"{section}.{held[0]}") if held else ([], section)
        else:
            rows, name = sec, section
        if not isinstance(rows, list):
            raise _bad(where, f"'{name}'", rows, "a list of per-rank rows")
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise _bad(where, f"{name}[{i}]", r, "an object")
            number(r.get("rank"), where, f"{name}[{i}].rank", count=True)
            number(r.get(fld), where, f"{name}[{i}].{fld}")
    skew = doc.get("skew")
    if isinstance(skew, dict):
        number(skew.get("straggler_rank"), where, "skew.straggler_rank", count=True)
