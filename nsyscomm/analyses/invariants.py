"""What every summary keeps, whatever its input: no negative time, size or rate; no rank waiting
longer than it communicated, nor communicating longer than it ran; no call, step or skew longer
than the capture; a what-if that saves what it says and never lengthens a step. Checked on the
JSON document (analyses/contract.py) before any view or the gate reads it: a figure that breaks
one is a defect of nsyscomm, never something to print."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# rounding: figures made in floating point (ms from ns, percentages), and sources that keep their
# timestamps in floating point (a Flight Recorder dump's, to about 10 ns): a microsecond, below
# every figure's printed precision
_EPS_MS = 1e-3
_EPS_PCT = 1e-9


class InvariantError(AssertionError):
    """A summary broke one of its invariants: an internal error, reported as such (exit status 3)."""


def _numbers(v: Any, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _numbers(x, f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _numbers(x, f"{path}[{i}]")
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield path, float(v)


def _rows(doc: dict, key: str) -> list[dict]:
    v = doc.get(key)
    return [r for r in v if isinstance(r, dict)] if isinstance(v, list) else []


def _num(r: dict, k: str) -> float | None:
    v = r.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def violations(doc: dict) -> list[str]:
    """Every invariant the document breaks, one line each (empty: it keeps them all)."""
    out = [f"{p} is {v} (negative)" for p, v in _numbers(doc, "$") if v < 0]
    capture = _num(doc, "capture_ms")
    if capture is None:  # a document without it: a rank's span is within the capture
        capture = max((e for r in _rows(doc, "ranks") if (e := _num(r, "elapsed_ms")) is not None), default=None)
    for i, r in enumerate(_rows(doc, "ranks")):
        wait, comm, elapsed, pct = (_num(r, k) for k in ("wait_ms", "comm_ms", "elapsed_ms", "comm_pct"))
        if wait is not None and comm is not None and wait > comm + _EPS_MS:
            out.append(f"$.ranks[{i}]: waits {wait} ms, longer than its communication ({comm} ms)")
        if comm is not None and elapsed is not None and comm > elapsed + _EPS_MS:
            out.append(f"$.ranks[{i}]: communicates {comm} ms, longer than it ran ({elapsed} ms)")
        if pct is not None and pct > 100 + _EPS_PCT:
            out.append(f"$.ranks[{i}].comm_pct is {pct}, over 100")
    if capture is not None:
        longest = (
            [(f"$.summary[{i}].max_ms", _num(r, "max_ms")) for i, r in enumerate(_rows(doc, "summary"))]
            + [(f"$.top_skew[{i}].skew_ms", _num(r, "skew_ms")) for i, r in enumerate(_rows(doc, "top_skew"))]
            + [
                (f"$.steps[{i}].max_rank_comm_ms", _num(r, "max_rank_comm_ms"))
                for i, r in enumerate(_rows(doc, "steps"))
            ]
        )
        out += [
            f"{p} is {v} ms, longer than the capture ({capture} ms)" for p, v in longest if v and v > capture + _EPS_MS
        ]
    what_if = (doc.get("diagnosis") or {}).get("what_if") if isinstance(doc.get("diagnosis"), dict) else None
    for i, s in enumerate(what_if if isinstance(what_if, list) else []):
        for j, row in enumerate(
            [s, *[x for x in s.get("steps") or [] if isinstance(x, dict)]] if isinstance(s, dict) else []
        ):
            before, after = _num(row, "step_ms_before"), _num(row, "step_ms_after")
            where = f"$.diagnosis.what_if[{i}]" + (f".steps[{j - 1}]" if j else "")
            if before is not None and after is not None and after > before + _EPS_MS:
                out.append(f"{where}: a step of {before} ms made longer ({after} ms)")
            if capture is not None and before is not None and before > capture + _EPS_MS:
                out.append(f"{where}: a step of {before} ms, longer than the capture ({capture} ms)")
    return out


def check(doc: dict) -> dict:
    """doc, once it keeps every invariant; else InvariantError naming each broken one."""
    broken = violations(doc)
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise InvariantError(f"the summary breaks its invariants (a defect of nsyscomm, please report it): {shown}")
    return doc
