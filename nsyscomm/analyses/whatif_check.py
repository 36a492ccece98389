"""What the what-if may claim: the replay with nothing changed must give back each step's time as
the trace measured it, within a stated tolerance, before any scenario is believed for that step;
and every figure printed keeps the invariants 0 < after <= before <= the capture's length
(saved >= 0), nor leaves a step less time than its busiest rank's own work there. A step that
fails either is withheld with its reason, never printed."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pandas as pd


class Model(Protocol):
    """What these checks read of a nsyscomm.analyses.whatif_model.Model."""

    steps: list
    step_of: np.ndarray
    labels: dict
    graph: Any
    extra: dict
    measured: np.ndarray | None
    capture_ms: float | None


# a replayed step counts as reproduced within this much of its measured time: the larger of a
# share of it and a floor (the trace's clocks and the replay's float sums differ by far less;
# a dependency the model misses shifts a step by a whole call or more)
TOL_RELATIVE = 0.01
TOL_MS = 0.01
EPS_MS = 1e-6  # float noise of the replay's sums, far below any reported digit


def tolerance_ms(measured: np.ndarray) -> np.ndarray:
    return np.maximum(TOL_RELATIVE * np.abs(measured), TOL_MS)


def reproduction(m: Model, before: np.ndarray) -> tuple[np.ndarray, dict]:
    """(reproduced per step, the JSON section): each step's measured time beside its replay with
    nothing changed."""
    tol = {
        "relative": TOL_RELATIVE,
        "absolute_ms": TOL_MS,
        "rule": "|replayed - measured| <= max(relative x measured, absolute_ms)",
    }
    if m.measured is None:
        ok = np.ones(len(m.steps), bool)
        return ok, {
            "tolerance": tol,
            "steps": [],
            "reproduced": len(ok),
            "of": len(ok),
            "note": "no measured step times in this input",
        }
    measured = np.asarray(m.measured, dtype=np.float64)
    ok = np.isfinite(before) & np.isfinite(measured) & (np.abs(before - measured) <= tolerance_ms(measured))
    steps = [
        {"step": s, "measured_ms": float(a), "replayed_ms": float(b), "reproduced": bool(k)}
        for s, a, b, k in zip(m.steps, measured, before, ok)
    ]
    return ok, {"tolerance": tol, "steps": steps, "reproduced": int(ok.sum()), "of": len(ok)}


NOT_REPRODUCED = (
    "the replay with nothing changed does not reproduce this step's measured time within the tolerance "
    "(whatif.reproduction): its what-if is withheld"
)


def own_work(m: Model, dur: np.ndarray, delay: np.ndarray) -> np.ndarray:
    """Per step, the time its ranks' own work needs under a scenario, which no waiting removed
    can shorten: the longest chain of one rank's operations in the step (each depends on the one
    before it on that rank), each counting the time before it (compute, host work: its launch
    delay) and a plain operation its duration too. At a collective only the least time any of its
    ranks spent before it counts (no_straggler lets the collective start at its first rank's
    arrival: a late rank's extra time before it is the waiting it removes), and its transfer not
    at all. Communication a per-op trace times on streams of its own overlaps the rank's compute
    and adds nothing; operations in flight together on a rank are on different chains. On a job
    timed on the host the operations are the rank's host events and its calls' executions
    (nsyscomm.analyses.call_graph): the chain counts the compute between its host events, an
    asynchronous call's time from its issue to its wait included. A
    bound the measured step breaks (a step shorter than its rank's work, overlapping its
    neighbours) is capped at the measured time where it is applied (violation)."""
    g = m.graph
    group = np.asarray(g.group)
    plain = group < 0
    step_of = np.asarray(m.step_of)
    rank = np.asarray(m.labels["rank"])
    same = (rank[g.src] == rank[g.dst]) & (step_of[g.src] == step_of[g.dst])
    # the time before an operation without a predecessor lies before its origin; chained steps
    # time the first step from its first call, so the time before a rank's first call in it lies
    # outside it too
    before_op = np.maximum(np.asarray(delay, np.float64), 0.0)
    first = np.ones(g.n, bool)
    first[g.dst] = False
    opens = np.ones(g.n, bool)
    opens[g.dst[same]] = False
    before_op[first | (opens & (step_of == 0) & bool(getattr(m, "chained_steps", True)))] = 0.0
    # (a host-timed job's issues: their collective's other issues, nsyscomm.analyses.call_graph)
    extra = getattr(m, "extra", None)
    arrival = extra.get("arrival") if isinstance(extra, dict) else None
    if arrival is not None:
        plain = plain & (arrival < 0)
        group = np.where(arrival >= 0, group.max(initial=-1) + 1 + arrival, group)
    least = before_op.copy()
    if (~plain).any():
        least[~plain] = pd.Series(before_op[~plain]).groupby(group[~plain]).transform("min").to_numpy()
    work = np.where(plain, before_op + np.maximum(np.asarray(dur, np.float64), 0.0), least)
    comm = m.extra.get("comm") if isinstance(getattr(m, "extra", None), dict) else None
    if comm is not None:
        work = np.where(comm, 0.0, work)
    chain = np.zeros(g.n)
    for lv in range(g.levels):  # a level's predecessors all lie in earlier levels
        e = slice(g.edge_ptr[lv], g.edge_ptr[lv + 1])
        ok = same[e]
        np.maximum.at(chain, g.dst[e][ok], chain[g.src[e][ok]])
        ops = g.order[g.level_ptr[lv] : g.level_ptr[lv + 1]]
        chain[ops] += work[ops]
    out = np.zeros(len(m.steps))
    inside = step_of >= 0
    if inside.any():
        np.maximum.at(out, step_of[inside], chain[inside])
    return out


def violation(before: float, after: float, capture_ms: float | None, floor: float = 0.0) -> str | None:
    """Why a step's figures cannot be printed (None: they can). floor: the step's own work under
    the scenario (own_work), at most its measured time: a measured step shorter than it already
    overlaps its neighbours, and only what was measured bounds it then."""
    if not (np.isfinite(before) and np.isfinite(after)):
        return "the replay gives no finite time for this step"
    if after < -EPS_MS or before < -EPS_MS:
        return "the replay gives this step a negative time (the scenario moves work across step boundaries)"
    if before > EPS_MS and after <= EPS_MS:
        return "the replay gives this step no time at all (the scenario moves its work into other steps)"
    floor = min(floor, before)
    if after < floor - max(EPS_MS, TOL_RELATIVE * floor):
        return (
            f"the replay leaves this step {after:.3f} ms, less than its busiest rank's own work between calls "
            f"({floor:.3f} ms), which no scenario removes: the scenario moves work into other steps"
        )
    if after > before + EPS_MS:
        return "the scenario would make this step longer than measured: the model gives no saving to report"
    if capture_ms is not None and max(before, after) > capture_ms + EPS_MS:
        return "the replay gives this step more time than the whole capture"
    return None


def per_step(
    m: Model, before: np.ndarray, after: np.ndarray, base: np.ndarray, floor: np.ndarray | None = None
) -> tuple[np.ndarray, list]:
    """(kept per step, reason per step or None) of one scenario; base: the steps that may count;
    floor: each step's own work under the scenario (own_work)."""
    reasons: list[str | None] = []
    floors = np.zeros(len(before)) if floor is None else floor
    for b, a, ok, f in zip(before, after, base, floors):
        reasons.append(violation(float(b), float(a), m.capture_ms, float(f)) if ok else None)
    keep = base & np.array([r is None for r in reasons], bool)
    return keep, reasons


def assert_row(row: dict, capture_ms: float | None) -> None:
    """The invariants of a printed row, checked once more on what is printed (a bug here raises)."""
    figures = [(row["step_ms_before"], row["step_ms_after"])]
    figures += [(s["step_ms_before"], s["step_ms_after"]) for s in row["steps"] if "withheld" not in s]
    for b, a in figures:
        if violation(b, a, capture_ms) is not None:
            raise AssertionError(f"what-if {row['scenario']}: {b} -> {a} ms breaks 0 <= after <= before <= capture")
    if row["saved_ms"] < -EPS_MS or row["total_saved_ms"] < -EPS_MS:
        raise AssertionError(f"what-if {row['scenario']}: negative saving {row['saved_ms']}")
    if row["slowdown"] is None or row["slowdown"] < 1 - EPS_MS:
        raise AssertionError(f"what-if {row['scenario']}: slowdown {row['slowdown']} below 1")
