"""What the what-if may claim: the replay with nothing changed must give back each step's time as
the trace measured it, within a stated tolerance, before any scenario is believed for that step;
and every figure printed keeps the invariants 0 <= after <= before <= the capture's length
(saved >= 0). A step that fails either is withheld with its reason, never printed."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Model(Protocol):
    """What these checks read of a nsyscomm.analyses.whatif.Model (which imports this module)."""

    steps: list
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


def violation(before: float, after: float, capture_ms: float | None) -> str | None:
    """Why a step's figures cannot be printed (None: they can)."""
    if not (np.isfinite(before) and np.isfinite(after)):
        return "the replay gives no finite time for this step"
    if after < -EPS_MS or before < -EPS_MS:
        return "the replay gives this step a negative time (the scenario moves work across step boundaries)"
    if after > before + EPS_MS:
        return "the scenario would make this step longer than measured: the model gives no saving to report"
    if capture_ms is not None and max(before, after) > capture_ms + EPS_MS:
        return "the replay gives this step more time than the whole capture"
    return None


def per_step(m: Model, before: np.ndarray, after: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, list]:
    """(kept per step, reason per step or None) of one scenario; base: the steps that may count."""
    reasons: list[str | None] = []
    for b, a, ok in zip(before, after, base):
        reasons.append(violation(float(b), float(a), m.capture_ms) if ok else None)
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
