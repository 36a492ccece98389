"""The JSON output contract (DESIGN.md, "schema": 1) that scripts and CI gates read."""

from __future__ import annotations

import json
import math

from nsyscomm import __version__
from nsyscomm.api import SCHEMA_VERSION, Result

SUMMARY_KEYS = ("op", "bytes", "count", "calls", "ranks", "total_ms", "avg_ms", "p50_ms", "max_ms",
                "algbw_GBps", "busbw_GBps", "group_size", "dtype", "caller")
RANK_KEYS = ("rank", "host", "calls", "bytes", "comm_ms", "wait_ms", "elapsed_ms", "comm_pct")
_INT_KEYS = {"bytes", "count", "calls", "ranks", "group_size", "rank"}


def _clean(v, key=None):
    if v is None:
        return None
    try:
        if v != v:  # NaN, pd.NA
            return None
    except (TypeError, ValueError):
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return None
    if key in _INT_KEYS and isinstance(v, float):
        return int(v)
    return v


def records(df, keys) -> list[dict]:
    cols = [k for k in keys if k in df.columns]
    return [{k: _clean(row[k], k) for k in cols} for row in df[cols].to_dict("records")]


def document(result: Result, by_caller: bool = False) -> dict:
    return {
        "schema": SCHEMA_VERSION,
        "tool": "nsyscomm",
        "version": __version__,
        "reports": result.reports,
        "summary": records(result.summarize(by_caller=by_caller), SUMMARY_KEYS),
        "ranks": records(result.ranks, RANK_KEYS),
        "skew": result.skew,
        "warnings": list(result.warnings),
    }


def dumps(result: Result, by_caller: bool = False) -> str:
    return json.dumps(document(result, by_caller), indent=2, allow_nan=False)
