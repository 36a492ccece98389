"""The JSON output contract ("schema": 1; docs/architecture.md, "JSON contract") that scripts and CI gates read."""

from __future__ import annotations

import json

from nsyscomm import __version__
from nsyscomm.analyses.result import SCHEMA_VERSION, Result
from nsyscomm.views.units import json_value

SUMMARY_KEYS = (
    "op",
    "bytes",
    "count",
    "calls",
    "ranks",
    "total_ms",
    "avg_ms",
    "p50_ms",
    "max_ms",
    "algbw_GBps",
    "busbw_GBps",
    "group_size",
    "dtype",
    "caller",
)
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
}


def _clean(v, key=None):
    v = json_value(v)
    if key in _INT_KEYS and isinstance(v, float):
        return int(v)
    return v


def records(df, keys) -> list[dict]:
    cols = [k for k in keys if k in df.columns]
    return [{k: _clean(row[k], k) for k in cols} for row in df[cols].to_dict("records")]


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
        "summary": records(result.summarize(by_caller=by_caller), SUMMARY_KEYS),
        "ranks": records(result.ranks, RANK_KEYS),
        "skew": result.skew,
        # beyond the schema-1 keys (extra keys are allowed): cross-rank detail
        "overlap": None,  # filled last, below
        "steps": records(
            result.steps, ("step", "calls", "comm_ms", "max_rank_comm_ms", "max_rank", "avg_skew_ms", "max_skew_ms")
        ),
        "size_histogram": records(result.size_histogram, ("op", "bin_lo", "bin_hi", "calls", "avg_bytes", "total_ms")),
        "top_skew": records(
            result.top_skew(10),
            ("op", "group", "seq", "bytes", "step", "caller", "participants", "last_rank", "skew_ms", "latency_ms"),
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
    }
    links = result.link_metrics
    if not links.empty:
        doc["link_metrics"] = records(
            links, ("op", "bytes", "metric", "calls", "devices", "covered_ms", "avg_value", "max_value")
        )
    if result.nccl_logs:
        doc["nccl"] = nccl_section(result, by_caller)
    from nsyscomm.views import whatif_out  # what-if replay (issue 23): diagnosis.what_if / .attribution

    doc.setdefault("diagnosis", {}).update(whatif_out.json_section(result))
    from nsyscomm.views import diagnosis_out  # why late (issue 21): diagnosis.late

    doc["diagnosis"].update(diagnosis_out.json_section(result))
    from nsyscomm.analyses.hang import contract  # issue 22

    doc["hang"] = contract(result.hang)
    return doc


def dumps(result: Result, by_caller: bool = False) -> str:
    return json.dumps(document(result, by_caller), indent=2, allow_nan=False)
