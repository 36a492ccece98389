"""What every summary keeps, whatever its input: no negative time, size or rate; no rank waiting
longer than it communicated, nor communicating, nor arriving late in all, longer than it ran; no
step late by more than its own span; no communicator communicating longer than its ranks ran
together; no call, step or skew longer than the capture; one straggler in every view (the rank
the Diagnosis names first); a what-if that saves what it says, never lengthens a step nor
erases one, and a slowdown over ideal of at least 1.

An analysis whose figures break one of these on some input is **withheld** with the reason, and
the rest of the output stands: `Result.withheld` (section -> reason) is checked on the Result's
own figures before any view reads them (every view prints the reason instead of the figures),
and `enforce` checks the JSON document once more (analyses/contract.py) and withholds any other
section that breaks one. A breach is never printed, and never ends a run in an internal error."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

# rounding: figures made in floating point (ms from ns, percentages), and sources that keep their
# timestamps in floating point (a Flight Recorder dump's, to about 10 ns): a microsecond, below
# every figure's printed precision
_EPS_MS = 1e-3
_EPS_PCT = 1e-9
_EPS_RATIO = 1e-9

# the sections an analysis may be withheld as, in the order the outputs list them, each with
# the words the views print for it
SECTIONS = {
    "summary": "communication summary",
    "ranks": "per-rank table",
    "late": "late arrivals and the straggler",
    "steps": "per-step table",
    "steps_late": "per-step lateness (last to arrive, late by)",
    "top_skew": "collectives by arrival skew",
    "dimensions": "communication by dimension",
    "what_if": "what-if scenarios",
    "attribution": "slowdown attributed over ideal",
    "straggler_model": "straggler model (OSDI'25)",
}


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


def _records(df: pd.DataFrame | None) -> list[dict]:
    return [] if df is None or df.empty else df.to_dict("records")


# --- the document's invariants, each named where it is ---


def violations(doc: dict) -> list[str]:
    """Every invariant the document breaks, one line each (empty: it keeps them all)."""
    out = [f"{p} is {v} (negative)" for p, v in _numbers(doc, "$") if v < 0]
    capture = _num(doc, "capture_ms")
    if capture is None:  # a document without it: a rank's span is within the capture
        capture = max((e for r in _rows(doc, "ranks") if (e := _num(r, "elapsed_ms")) is not None), default=None)
    for i, r in enumerate(_rows(doc, "ranks")):
        out += [f"$.ranks[{i}]{why}" for why in _rank_breaches(r)]
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
    d = doc.get("diagnosis")
    diagnosis: dict = d if isinstance(d, dict) else {}
    what_if = diagnosis.get("what_if")
    out += [
        f"$.diagnosis.what_if{why}" for why in what_if_breaches(what_if if isinstance(what_if, list) else [], capture)
    ]
    attribution = diagnosis.get("attribution")
    out += [
        f"$.diagnosis.attribution[{i}]: slowdown over ideal {s}, below 1"
        for i, a in enumerate(attribution if isinstance(attribution, list) else [])
        if isinstance(a, dict) and (s := _num(a, "slowdown")) is not None and s < 1 - _EPS_RATIO
    ]
    out += [f"$.diagnosis.straggler_model: {why}" for why in _model_breaches(diagnosis.get("straggler_model"))]
    out += _straggler_breaches(doc, diagnosis)
    return out


def _rank_breaches(r: dict) -> list[str]:
    wait, comm, elapsed, pct = (_num(r, k) for k in ("wait_ms", "comm_ms", "elapsed_ms", "comm_pct"))
    out = []
    if wait is not None and comm is not None and wait > comm + _EPS_MS:
        out.append(f": waits {wait} ms, longer than its communication ({comm} ms)")
    if comm is not None and elapsed is not None and comm > elapsed + _EPS_MS:
        out.append(f": communicates {comm} ms, longer than it ran ({elapsed} ms)")
    if pct is not None and pct > 100 + _EPS_PCT:
        out.append(f".comm_pct is {pct}, over 100")
    return out


def what_if_breaches(rows: list, capture: float | None) -> list[str]:
    """What the what-if rows break (each line starts with the row's place, "[i]..."): a step made
    longer, erased or longer than the capture, a slowdown below 1, rows of one job whose
    "before" differs with no step named as left out."""
    out = []
    befores = set()
    for i, s in enumerate(r for r in rows if isinstance(r, dict)):
        steps = [x for x in s.get("steps") or [] if isinstance(x, dict)]
        for j, row in enumerate([s, *steps]):
            before, after = _num(row, "step_ms_before"), _num(row, "step_ms_after")
            where = f"[{i}]" + (f".steps[{j - 1}]" if j else "")
            if before is not None and after is not None and after > before + _EPS_MS:
                out.append(f"{where}: a step of {before} ms made longer ({after} ms)")
            if before is not None and after is not None and before > _EPS_MS and after <= 0:
                out.append(f"{where}: a step of {before} ms erased ({after} ms)")
            if capture is not None and before is not None and before > capture + _EPS_MS:
                out.append(f"{where}: a step of {before} ms, longer than the capture ({capture} ms)")
        slowdown = s.get("slowdown")
        if isinstance(slowdown, (int, float)) and slowdown < 1 - _EPS_RATIO:
            out.append(f"[{i}]: slowdown {slowdown}, below 1")
        if not any("withheld" in x for x in steps) and (b := _num(s, "step_ms_before")) is not None:
            befores.add(round(b, 6))
    if len(befores) > 1:
        out.append(f": scenarios of one job measured from different steps with none left out ({sorted(befores)} ms)")
    return out


def _model_breaches(sm: Any) -> list[str]:
    if not isinstance(sm, dict):
        return []
    out = [
        f"{k} is {v}, below 1"
        for k in ("blocking_slowdown", "launch_slowdown")
        if isinstance(v := sm.get(k), (int, float)) and v < 1 - _EPS_RATIO
    ]
    return out


def _straggler_breaches(doc: dict, diagnosis: dict) -> list[str]:
    skew = doc.get("skew")
    named = diagnosis.get("late_ranks")
    if not isinstance(skew, dict) or not isinstance(named, list):
        return []
    first = named[0].get("rank") if named and isinstance(named[0], dict) else None
    if skew.get("straggler_rank") != first:
        return [f"$.skew.straggler_rank is {skew.get('straggler_rank')}, the Diagnosis names rank {first} first"]
    return []


def _section_of(path: str) -> str:
    """The section a breach's path lies in: $.diagnosis.<key>, else the top-level key."""
    parts = path.removeprefix("$.").replace("[", ".").split(".")
    head = parts[0].split(":")[0]
    if head == "diagnosis" and len(parts) > 1:
        return "diagnosis." + parts[1].split(":")[0]
    return head


def enforce(doc: dict) -> dict:
    """doc with every section that breaks an invariant withheld: emptied, and listed under
    `withheld` ({section, reason}) beside what the Result withheld already."""
    withheld = doc.setdefault("withheld", [])
    for _ in range(len(SECTIONS) + 8):  # a withheld section can no longer break one
        broken = violations(doc)
        if not broken:
            break
        section = _section_of(broken[0])
        reasons = [b for b in broken if _section_of(b) == section]
        _empty(doc, section)
        shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
        withheld.append({"section": section, "reason": f"its figures break the summary's invariants: {shown}"})
    return doc


def _empty(doc: dict, section: str) -> None:
    at, key = (doc["diagnosis"], section.split(".", 1)[1]) if section.startswith("diagnosis.") else (doc, section)
    v = at.get(key)
    if key == "skew" and isinstance(v, dict):
        v["straggler_rank"] = None
        return
    at[key] = [] if isinstance(v, list) else None


# --- the Result's analyses, checked before any view reads them ---


def ranks_reason(ranks: pd.DataFrame) -> str | None:
    for r in _records(ranks):
        breaches = [f"{p} is {v} (negative)" for p, v in _numbers(r, "") if v < 0] + _rank_breaches(r)
        if breaches:
            return f"rank {r.get('rank')}" + "; ".join(
                b if b.startswith(":") else ": " + b.lstrip(".") for b in breaches
            )
    return None


def late_reason(late: pd.DataFrame, ranks: pd.DataFrame) -> str | None:
    """A rank late in all for longer than it ran, or late by a negative time."""
    if late.empty:
        return None
    if (late["delay_ms"] < 0).any():
        return "a late arrival with a negative delay"
    elapsed = {int(r["rank"]): r["elapsed_ms"] for r in _records(ranks) if r.get("elapsed_ms") == r.get("elapsed_ms")}
    for rank, total in late.groupby("rank")["delay_ms"].sum().items():
        ran = elapsed.get(int(rank))
        if ran is not None and total > ran + _EPS_MS:
            return (
                f"rank {int(rank)} would be late {total:,.3f} ms in all, longer than it ran ({ran:,.3f} ms): "
                "one delay counted at several calls"
            )
    return None


def steps_late_reason(steps: pd.DataFrame, spans: pd.DataFrame) -> str | None:
    """A step late by more than its span (its first call's start to its last call's end)."""
    if steps.empty or "late_ms" not in steps or spans.empty:
        return None
    span = (spans.set_index("step")["last_ns"] - spans.set_index("step")["first_ns"]) / 1e6
    for r in _records(steps):
        late, step = r.get("late_ms"), r.get("step")
        if late is None or late != late or step is None:
            continue
        if late < 0:
            return f"step {int(step)}: late by {late} ms (negative)"
        s = span.get(step)
        if s is not None and late > s + _EPS_MS:
            return (
                f"step {int(step)} would be late by {late:,.3f} ms, longer than the step ({s:,.3f} ms from its "
                "first call to its last): one delay counted at several calls"
            )
    return None


def dimensions_reason(dims: pd.DataFrame, ranks: pd.DataFrame) -> str | None:
    """A communicator communicating longer than its ranks ran together, waiting longer than it
    communicated, or a negative time."""
    elapsed = {int(r["rank"]): r["elapsed_ms"] for r in _records(ranks) if r.get("elapsed_ms") == r.get("elapsed_ms")}
    for r in _records(dims):
        comm, wait = r.get("comm_ms"), r.get("wait_ms")
        if any(isinstance(v, float) and v < 0 for v in (comm, wait, r.get("exposed_ms"))):
            return f"group {r.get('group')}: a negative time"
        members = [int(x) for x in str(r.get("ranks") or "").split(",") if x.strip().lstrip("-").isdigit()]
        ran = sum(elapsed[m] for m in members if m in elapsed)
        if comm is not None and members and all(m in elapsed for m in members) and comm > ran + _EPS_MS:
            return (
                f"group {r.get('group')} would communicate {comm:,.3f} ms, longer than its ranks ran together "
                f"({ran:,.3f} ms): calls queued together counted each"
            )
        if comm is not None and wait is not None and wait > comm + _EPS_MS:
            return f"group {r.get('group')} waits {wait:,.3f} ms, longer than it communicates ({comm:,.3f} ms)"
    # a dimension's groups together: the Diagnosis' "by dimension" line sums them
    by_dim: dict[str, tuple[float, set[int]]] = {}
    for r in _records(dims):
        in_group = {int(x) for x in str(r.get("ranks") or "").split(",") if x.strip().lstrip("-").isdigit()}
        group_comm = _num(r, "comm_ms") or 0.0
        total, ranks_of = by_dim.get(str(r.get("dimension")), (0.0, set()))
        by_dim[str(r.get("dimension"))] = (total + group_comm, ranks_of | in_group)
    for dim, (dim_comm, dim_ranks) in by_dim.items():
        if dim_ranks and all(m in elapsed for m in dim_ranks):
            ran = sum(elapsed[m] for m in dim_ranks)
            if dim_comm > ran + _EPS_MS:
                return (
                    f"dimension {dim} would communicate {dim_comm:,.3f} ms, longer than its ranks ran together "
                    f"({ran:,.3f} ms): calls queued together counted each"
                )
    return None


def what_if_reason(rows: list[dict], capture: float | None) -> str | None:
    broken = what_if_breaches(rows, capture)
    return "; ".join(broken[:3]) if broken else None


def attribution_reason(rows: list[dict]) -> str | None:
    low = [r for r in rows if isinstance(r.get("slowdown"), (int, float)) and r["slowdown"] < 1 - _EPS_RATIO]
    if low:
        r = low[0]
        return f"{r['by']} {r['key']}: slowdown over ideal {r['slowdown']:.4f}, below 1"
    return None


def straggler_model_reason(sm: dict | None) -> str | None:
    if not sm:
        return None
    broken = _model_breaches(sm) + [
        f"{k} is {v} (negative)" for k in ("Ms", "Mw") if isinstance(v := sm.get(k), (int, float)) and v < 0
    ]
    broken += [f"{p.lstrip('.')} is {v} ms (negative)" for p, v in _numbers(sm.get("steps") or [], "") if v < 0]
    return "; ".join(broken) if broken else None


def doc_reason(section: str, rows: list[dict], capture: float | None) -> str | None:
    """A table's own invariants, as the document's (no negative figure, nothing longer than the
    capture), for the tables checked only there: summary, steps, top_skew."""
    broken = violations({"capture_ms": capture, section: rows})
    return "; ".join(b.removeprefix("$.") for b in broken[:3]) if broken else None


def lines(withheld: dict[str, str]) -> list[str]:
    """One line per withheld section, as every view prints it."""
    return [f"withheld: {SECTIONS.get(k, k)}: {why}" for k, why in withheld.items()]
