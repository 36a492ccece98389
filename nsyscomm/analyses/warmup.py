"""Warm-up steps: the steps a job's steady-state figures leave out (docs/architecture.md, "Setup
calls and warm-up steps"). A step is warm-up when it holds a call that set up its communicator,
or when it is one of the job's first steps and took over WARMUP_FACTOR times the median of the
later steps
(caches, allocator, autotuning, lazy compilation: the first steps of a job). A slow step later
in the job is no warm-up: it is what the diagnosis is for. The last step standing is never
warm-up: a job of one step has no steady state to compare it with."""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np

from nsyscomm import duck

WARMUP_FACTOR = 3.0
WARMUP_MIN_NS = 1_000_000  # a first step longer by less than this is no warm-up
MIN_LATER = 2  # later steps needed for a median to compare with
# a first meeting's lateness beyond what the ranks' start explains, up to which it is still
# start-up (nsyscomm.combine.setup.mark_startup): wide enough that the scheduling of the ranks'
# own work before their first call (interpreter start, imports, model building on a loaded
# host) cannot flip it between identical runs; a slow checkpoint load or first batch is longer
STARTUP_SLACK_NS = 100_000_000


def warmup(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """{steps: the warm-up step numbers, per_step: [{step, step_ms, reason}] for those, rule}."""
    df = duck.frame(con.execute(duck.sql("step_spans")))
    out: dict[str, Any] = {"steps": [], "per_step": [], "rule": RULE}
    if len(df) < 2:
        return out
    steps = [int(s) for s in df["step"]]
    ns = df["step_ns"].to_numpy(np.float64)
    reasons: dict[int, str] = {}
    for s, setup in zip(steps, df["setup_calls"]):
        if setup:
            reasons[s] = f"{int(setup)} call(s) setting up their communicator"
    for i, s in enumerate(steps):
        rest = [ns[j] for j in range(i + 1, len(steps)) if steps[j] not in reasons]
        if len(rest) < MIN_LATER:
            break
        med = float(np.median(rest))
        if ns[i] > WARMUP_FACTOR * med and ns[i] - med >= WARMUP_MIN_NS:
            reasons.setdefault(s, f"first steps: {ns[i] / 1e6:.3f} ms against a median of {med / 1e6:.3f} ms after")
        elif s not in reasons:
            break
    if len(reasons) >= len(steps):  # no steady step left to compare with
        return out
    by_step = dict(zip(steps, ns))
    out["steps"] = sorted(reasons)
    out["per_step"] = [{"step": s, "step_ms": float(by_step[s]) / 1e6, "reason": reasons[s]} for s in out["steps"]]
    return out


RULE = (
    "warm-up steps: those holding a call that set up its communicator, and the first steps while each took "
    f"over {WARMUP_FACTOR:g} times the median of the later steps; left out of the what-if's job figures and "
    "the charts' scale"
)


def startup(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The job's first meetings, every participant's first collective (sql/first_meetings.sql):
    {collectives: those whose whole skew is start-up (logical_collectives.startup), max_skew_ms:
    their largest, late: the first meetings whose last rank came beyond what start-up explains
    (named late in the Diagnosis), rows: [{op, group, step, participants, last_rank, skew_ms,
    startup_ms, late_ms, set_aside}]}."""
    rows = duck.frame(con.execute(duck.sql("startup")))
    aside = rows[rows["set_aside"].astype(bool)] if len(rows) else rows
    return {
        "collectives": len(aside),
        "max_skew_ms": float(aside["skew_ms"].max()) if len(aside) else 0.0,
        "late": len(rows) - len(aside),
        "rows": rows,
        "note": STARTUP_NOTE,
    }


STARTUP_NOTE = (
    "start-up skew: at the job's first collective the ranks meet for the first time; the part of their "
    "arrival skew that their start explains (when each rank's capture began) is start-up: no rank is "
    "named late for it, it is left out of the arrival skew and the gate, and the what-if's no_straggler "
    f"keeps it. A rank later than that by over {STARTUP_SLACK_NS / 1e6:g} ms is late, named in the Diagnosis "
    "with its cause; the gate's arrival and wait figures leave every first meeting out"
)
