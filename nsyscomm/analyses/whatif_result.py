"""The what-if analysis of a Result (the front door of nsyscomm.analyses.whatif): the job's per-op
trace when it was read from one, else its collectives, replayed under every scenario; and the
replayed timeline of one scenario for the Perfetto view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from nsyscomm.analyses import replay, stragglers
from nsyscomm.analyses.whatif import MAX_CALLS_PER_RANK, analyse, from_ops, from_trace, scenarios

if TYPE_CHECKING:
    import duckdb


class _ResultLike(Protocol):
    """What of_result() and timeline() read of a Result (nsyscomm.analyses.result.Result, which
    imports this module, so it is not imported back)."""

    @property
    def con(self) -> duckdb.DuckDBPyConnection: ...
    @property
    def op_trace(self) -> tuple | None: ...  # (ops, meta) of a per-op trace input
    @property
    def reference(self) -> pd.DataFrame | None: ...
    def _query(self, name: str, **params: Any) -> pd.DataFrame: ...


def _prepared(result: _ResultLike, ops: pd.DataFrame, meta: dict) -> stragglers.Trace:
    """The per-op trace ready to replay; a trace whose operations wait on each other in a cycle
    (its values each in range, their order impossible) is the input's fault: an InputError
    naming it."""
    try:
        return stragglers.prepare(ops, meta)
    except replay.CycleError as e:
        from pathlib import Path

        from nsyscomm.errors import InputError
        from nsyscomm.ingest.straggler import trace as straggler_trace

        src = next((s for s in getattr(result, "sources", ()) if straggler_trace.is_trace(Path(s))), "what-if trace")
        raise InputError(
            f"{src}: no order of its operations is possible ({e}); check dp_size/pp_size in its job "
            f"description and the trace's seq_id order"
        ) from None


def of_result(result: _ResultLike) -> dict:
    """The what-if analysis of a Result: its per-op trace when it was read from one (with the
    artifact's own figures under 'straggler_model'), else its collectives."""
    op_trace = getattr(result, "op_trace", None)
    if op_trace is not None:
        trace = _prepared(result, *op_trace)
        out = analyse(from_trace(trace))
        paper = stragglers.analyse(trace)
        out["straggler_model"] = {
            "blocking_slowdown": paper["blocking_slowdown"],
            "launch_slowdown": paper["launch_slowdown"],
            "Ms": paper["ms"]["Ms"],
            "Mw": paper["mw"]["Mw"],
            "mw_ranks": paper["mw"]["ranks"],
            "steps": [
                {
                    "step": s,
                    "measured_ms": 1e3 * paper["step_t_base"][s],
                    "no_delay_ms": 1e3 * paper["step_t_nodelay"][s],
                    "ideal_ms": 1e3 * paper["step_t_noblk"][s],
                }
                for s in paper["step_t_base"]
            ],
        }
        out["notes"] = out["notes"] + [
            "Per-op trace (OSDI'25 artifact format): pipeline and data-parallel dependencies as in the "
            "artifact; ideal = compute at its type's mean and communication at its type's median over all "
            "workers and steps, without launch delays; straggler_model.blocking_slowdown = no-delay / ideal "
            "step time (the paper's S)."
        ]
        return out
    row = result.con.execute(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM collectives GROUP BY rank)"
    ).fetchone()
    per_rank = row[0] if row is not None else 0
    if per_rank > MAX_CALLS_PER_RANK:
        return {
            "what_if": [],
            "attribution": [],
            "notes": [
                f"what-if replay skipped: {per_rank} calls on one rank, over the replay's limit of "
                f"{MAX_CALLS_PER_RANK}; profile fewer steps (nsyscomm run --steps A:B)"
            ],
        }
    ops = result._query("replay_ops")
    if ops.empty:
        return {"what_if": [], "attribution": [], "notes": ["no timed calls: nothing to replay"]}
    warm = getattr(result, "warmup", None) or {}
    return analyse(from_ops(ops), getattr(result, "reference", None), set(warm.get("steps", ())))


def timeline(result: _ResultLike, scenario: str) -> pd.DataFrame:
    """Every replayed operation's start and end (ns, on the measured clock) under a scenario:
    rank, step, name, start_ns, end_ns. Raises KeyError for a scenario the job does not allow."""
    op_trace = getattr(result, "op_trace", None)
    if op_trace is not None:
        from nsyscomm.ingest.straggler import trace as straggler_trace

        trace = _prepared(result, *op_trace)
        m = from_trace(trace)
        names = trace.ops["optype"].astype(str).to_numpy()
        steps = trace.ops["step"].to_numpy()
        # the trace's steps lie end to end on the collectives' clock (straggler_trace.calls)
        off_ms = straggler_trace.step_offsets(trace.ops).reindex(steps).to_numpy() * 1e3
    else:
        ops = result._query("replay_ops")
        m = from_ops(ops)
        names, steps, off_ms = m.key, ops["step"].to_numpy(), 0.0
    todo = scenarios(m, getattr(result, "reference", None))
    if scenario not in todo:
        raise KeyError(scenario)
    start, end = replay.replay(m.graph, *todo[scenario])
    # the calls' own spans (a host-timed job's replay also has its host events: nsyscomm.analyses.call_graph)
    calls = m.extra.get("call_node", np.arange(m.graph.n))
    return pd.DataFrame(
        {
            "rank": m.labels["rank"][calls],
            "step": steps,
            "name": names[calls],
            "start_ns": np.rint((start[calls] + off_ms) * 1e6),
            "end_ns": np.rint((end[calls] + off_ms) * 1e6),
        }
    )
