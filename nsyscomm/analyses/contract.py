"""The JSON output contract ("schema": 3; docs/architecture.md, "JSON contract"): the document a
Result makes, which `summarize --format json` prints, baselines hold and the gate compares. It
lives with the analyses, below the views and the gate, so both read it from the Result and
neither reads the other: views/json_out serializes it, nsyscomm.gate compares it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from nsyscomm import __version__
from nsyscomm.analyses import invariants
from nsyscomm.analyses.result import SCHEMA_VERSION, Result

if TYPE_CHECKING:
    import pandas as pd


def json_value(v: Any) -> Any:
    """A pandas/numpy scalar as a JSON value: NA/NaN/inf -> None, numpy scalars -> Python."""
    if v is None:
        return None
    try:
        if v != v:  # NaN, pd.NA
            return None
    except (TypeError, ValueError):  # pd.NA compares to NA
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isinf(v):
        return None
    return v


SUMMARY_KEYS = (
    "op",
    "bytes",
    "count",
    "calls",
    "ranks",
    "total_ms",
    "avg_ms",
    "p50_ms",
    "min_ms",
    "max_ms",
    "algbw_GBps",
    "busbw_GBps",
    "group_size",
    "dtype",
    "caller",
    "queued_ms",
)
STEP_KEYS = (
    "step",
    "warmup",
    "calls",
    "comm_ms",
    "late_rank",
    "late_ms",
    "avg_skew_ms",
    "max_skew_ms",
    "exposed_ms",
    "max_rank",
    "max_rank_comm_ms",
)
RANK_OP_KEYS = ("rank", "op", "calls", "bytes", "time_ms", "wait_ms")
RANK_KEYS = ("rank", "host", "calls", "bytes", "comm_ms", "wait_ms", "elapsed_ms", "comm_pct")
_INT_KEYS = {
    "bytes",
    "count",
    "calls",
    "ranks",
    "devices",
    "group_size",
    "rank",
    "step",
    "seq",
    "bin_lo",
    "bin_hi",
    "participants",
    "last_rank",
    "max_rank",
    "late_rank",
}


def _clean(v, key=None):
    v = json_value(v)
    if key in _INT_KEYS and isinstance(v, float):
        return int(v)
    return v


def records(df: pd.DataFrame, keys: Iterable[str]) -> list[dict]:
    cols = [k for k in keys if k in df.columns]
    if not cols:
        return [{} for _ in range(len(df))]
    values = [_plain(df[k], k) for k in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


def _plain(column: pd.Series, key: str | None = None) -> list:
    """A column's values as _clean gives them one by one, made a column at a time: a numpy column
    of integers or bools holds no NULL, and its list is already Python's ints (a pandas row
    boxed each value, and reading a string column's values one at a time cost more than the
    rest of the document's rows)."""
    import numpy as np

    values = column.tolist()
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "iub":
        return values
    return [_clean(v, key) for v in values]


def _ms(df, cols):
    df = df.copy()
    for c in cols:
        df[c.replace("_ns", "_ms")] = df[c] / 1e6
    return df


_PRIVATE_LOG_KEYS = ("hosts", "ranks", "communicators", "gpus")  # site details: left out of outputs


def nccl_section(result: Result, by_caller: bool = False) -> dict:
    logs = [{k: v for k, v in log.to_dict().items() if k not in _PRIVATE_LOG_KEYS} for log in result.nccl_logs]
    ref = result.reference if result.reference is not None else None
    return {
        "logs": logs,
        "reference": records(ref, ("op", "bytes", "busbw_GBps", "algbw_GBps", "time_us", "ranks"))
        if ref is not None
        else [],
        "vs_reference": records(
            result.vs_reference(by_caller),
            ("op", "bytes", "group_size", "busbw_GBps", "ref_busbw_GBps", "busbw_vs_ref"),
        ),
    }


def document(result: Result, by_caller: bool = False) -> dict:
    result.prefetch(
        ("summary", {"by_caller": by_caller}),
        ("ranks", {}),
        ("rank_ops", {}),
        ("skew", {}),
        ("steps", {}),
        ("size_histogram", {}),
        ("top_skew", {"limit": 10}),
        ("unmatched", {}),
        ("link_metrics", {}),
    )
    doc = {
        "schema": SCHEMA_VERSION,
        "tool": "nsyscomm",
        "version": __version__,
        "reports": result.reports,
        "capture_ms": result.capture_ms,  # first event to last, every rank's processes together
        "summary": records(result.summarize(by_caller=by_caller), SUMMARY_KEYS),
        "ranks": records(result.ranks, RANK_KEYS),
        "rank_ops": records(result.rank_ops, RANK_OP_KEYS),  # an added key: per rank and op (mpitrace)
        "skew": result.skew,
        # beyond the schema-3 keys (extra keys are allowed): cross-rank detail
        "overlap": None,  # filled last, below
        "steps": None,  # filled last, below: its exposed time is the overlap's
        "size_histogram": records(result.size_histogram, ("op", "bin_lo", "bin_hi", "calls", "avg_bytes", "total_ms")),
        "top_skew": records(
            result.top_skew(10),
            (
                "op",
                "group",
                "seq",
                "bytes",
                "step",
                "caller",
                "participants",
                "last_rank",
                "skew_ms",
                "latency_ms",
                "late_ms",
            ),
        ),
        "unmatched": records(
            result.unmatched.head(100),
            ("op", "group", "seq", "step", "bytes", "group_size", "participants", "ranks_seen"),
        ),
        "warnings": list(result.warnings),
    }
    # last: its per-call parts are still being made on another thread (nsyscomm.api.combine)
    # while the sections above are queried
    ov = _ms(result.overlap, ["comm_busy_ns", "exposed_ns"])
    ov_keys = ("rank", "step", "calls", "comm_busy_ms", "exposed_ms", "exposed_pct")
    doc["overlap"] = {
        "per_rank": records(ov[ov["scope"] == "rank"], ov_keys),
        "per_step": records(ov[ov["scope"] == "step"], ov_keys),
        # an added key: "host" (no call has GPU kernels: gloo, MPI) or "device"; the gate's
        # single-run margin reads it, since kernel-less calls have overlap rows too
        "timed_on": result.timed_on,
    }
    doc["steps"] = records(result.step_rows, STEP_KEYS)
    doc.update(set_aside_section(result))
    steady = result.steady_ranks
    steady = steady.assign(exposed_ms=steady["rank"].map(steady_exposed(result)))
    doc["steady"] = {  # an added key: what the gate compares per rank
        "per_rank": records(steady, ("rank", "calls", "comm_ms", "wait_ms", "avg_arrival_delay_ms", "exposed_ms")),
        "left_out": "warm-up steps, a last step of fewer calls than the others (teardown), calls that set up "
        "their communicator, and the job's first meetings",
    }
    links = result.link_metrics
    if not links.empty:
        doc["link_metrics"] = records(
            links, ("op", "bytes", "metric", "calls", "devices", "covered_ms", "avg_value", "max_value")
        )
    buckets = result.inspector_buckets
    if not buckets.empty:  # NCCL Inspector's Prometheus metrics
        doc["inspector_buckets"] = records(
            buckets,
            (
                "op",
                "api",
                "nranks",
                "n_nodes",
                "message_size",
                "bucket_lo",
                "algo_proto",
                "gpus",
                "busbw_gbs",
                "min_busbw_gbs",
                "exec_us",
            ),
        )
    if result.nccl_logs:
        doc["nccl"] = nccl_section(result, by_caller)
    diagnosis = whatif_section(result)  # what-if replay: diagnosis.what_if / .attribution
    diagnosis.update(diagnosis_section(result))  # why late: diagnosis.late
    doc["diagnosis"] = diagnosis
    from nsyscomm.analyses.hang import contract  # the hang diagnosis

    doc["hang"] = contract(result.hang)
    # (an added key) the analyses withheld for breaking an invariant, and why; enforce adds any
    # other section of the document that breaks one
    doc["withheld"] = [{"section": k, "reason": why} for k, why in result.withheld.items()]
    return invariants.enforce(doc)


def steady_exposed(result: Result) -> dict:
    """Per rank, the exposed communication of the steps that are not warm-up steps (ms; the
    calls of no known step included): the overlap per step, summed."""
    ov = result.overlap
    if ov.empty:
        return {}
    st = ov[ov["scope"] == "step"]
    st = st[~st["step"].isin(list(result.warmup["steps"]))]
    return (st.groupby("rank")["exposed_ns"].sum(min_count=1) / 1e6).to_dict()


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def whatif_section(result: Result) -> dict:
    """The keys the what-if replay adds to the document's `diagnosis` object."""
    a = result.what_if_analysis
    out = {"what_if": a["what_if"], "attribution": a["attribution"], "what_if_notes": a["notes"]}
    # (added keys: each step measured beside its replay with nothing changed, and what is withheld)
    out["whatif"] = {k: a[k] for k in ("reproduction", "withheld") if k in a}
    if "straggler_model" in a:
        out["straggler_model"] = a["straggler_model"]
    return _finite(out)


SETUP_KEYS = ("op", "bytes", "group", "step", "caller", "participants", "how", "took_ms", "init_ms")
SET_ASIDE = "left out of latency, bandwidth, per-rank and per-step statistics, the what-if and the gate"


JOINED_NOTE = (
    "ranks that ran out of inputs under torch.distributed.algorithms.Join: after the step they joined at, their "
    "calls are shadows of the other ranks' (Join's count of ranks not joined, DDP's bucket all_reduces, ZeRO's "
    "broadcasts); their waiting there is their absence, not lateness: no late arrival, skew or what-if saving"
)


def set_aside_section(result: Result) -> dict:
    """The keys of what the statistics set aside (added keys of schema 2): `setup`, the calls that
    set up their communicator, and `warmup`, the warm-up steps the what-if's job figures and the
    charts' scale leave out, `startup`, the collectives whose skew is the ranks' start-up, and
    `joined`, the ranks that joined early under Join, whose shadow collectives count no lateness."""
    rows = records(result.setup, SETUP_KEYS)
    inits = [t["total_s"] for log in result.nccl_logs for t in getattr(log, "init_timings", [])]
    w = result.warmup
    st = result.startup
    return {
        "setup": {
            "collectives": len(rows),
            "calls": int(sum(r.get("participants") or 0 for r in rows)),
            "took_ms": float(sum(r.get("took_ms") or 0.0 for r in rows)),
            "rows": rows,
            # NCCL_DEBUG=INFO's "Init timings" (--nccl-log): the longest communicator init, in s
            "nccl_log_init_s": max(inits) if inits else None,
            "note": f"calls that set up their communicator (NCCL initializes it inside its first collective): {SET_ASIDE}",
        },
        "warmup": {"steps": list(w["steps"]), "per_step": w["per_step"], "rule": w["rule"]},
        "startup": {
            "collectives": st["collectives"],
            "max_skew_ms": st["max_skew_ms"],
            "late": st["late"],
            "rows": records(
                st["rows"],
                ("op", "group", "step", "participants", "last_rank", "skew_ms", "startup_ms", "late_ms", "set_aside"),
            ),
            "note": st["note"],
        },
        "joined": {
            "ranks": records(result.joined, ("rank", "step", "shadow_calls", "first_step", "last_step", "shadow_ms")),
            "note": JOINED_NOTE,
        },
    }


LATE_KEYS = ("rank", "group", "seq", "op", "caller", "delay_ms", "cause", "detail")


def diagnosis_section(result: Result) -> dict:
    """The keys the late-arrival diagnosis adds to the document's `diagnosis` object."""
    late = result.late
    rows = [dict(zip(LATE_KEYS, r)) for r in zip(*(_plain(late[k]) for k in LATE_KEYS))]
    per = result.late_by_rank
    dims = result.dimensions
    dim_rows = [
        {
            "group": r.group,
            "dimension": r.dimension,
            "source": r.source,
            "group_size": json_value(r.group_size),
            "ranks": [int(x) for x in r.ranks.split(",") if x] if isinstance(r.ranks, str) else [],
            "comm_ms": json_value(r.comm_ms),
            "wait_ms": json_value(r.wait_ms),
            "exposed_ms": json_value(r.exposed_ms),
        }
        for r in dims.itertuples(index=False)
    ]
    order = result.late_ranks
    return {
        "late": rows,
        # (an added key) the ranks the Diagnosis names, in its order: the first is skew.straggler_rank
        "late_ranks": [{k: json_value(v) for k, v in r._asdict().items()} for r in order.itertuples(index=False)],
        "dimensions": dim_rows,
        "late_by_rank": [{k: json_value(v) for k, v in r._asdict().items()} for r in per.itertuples(index=False)],
        "late_notes": notes(result),
    }


def notes(result: Result) -> list[str]:
    out = []
    if not result.osrt_traced:
        out.append("some reports have no OS-runtime trace (nsys -t osrt): host time there cannot be named")
    return out
