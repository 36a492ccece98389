"""Ground truth, in plain Python from the generated events (never by running nsyscomm's SQL): the
rules the ingest and the analyses implement (the package docstring).

Nothing here comes from the code under test: a collective's fields and a rank marker's are the
values the generator put into the message (``Report.range(call=..., marker=...)``), never the
message parsed back, and the bus-bandwidth factors are written out below from their definition.
tests/synth/test_truth_independence.py keeps it so."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy

from nsyscomm.synth.report import (
    GENERATOR_VERSION,
    TRUTH_SCHEMA,
    Report,
)
from nsyscomm.synth.truth_calls import ROW_KEYS, LogicalKey, ProcCalls, Row, assign_ranks, infer_seq, proc_calls

# Bus-bandwidth factor per collective for a communicator of n ranks, as nccl-tests defines it
# (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md, and the factor each of
# its src/*.cu tests computes): all-reduce moves 2(n-1)/n of the message over the slowest link;
# all-gather, reduce-scatter, all-to-all, gather and scatter (n-1)/n; broadcast, reduce and
# send/recv the message itself. A barrier moves no data.
NCCL_TESTS_BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}


def _busbw_factor(op: str, n: int | None) -> float | None:
    if op not in NCCL_TESTS_BUSBW or not n:
        return None
    return NCCL_TESTS_BUSBW[op](n)


def _num(x: float) -> int | float:
    """int when integral (p50 may be .5)."""
    x = float(x)
    return int(x) if x.is_integer() else x


def _logical(rows: list[Row]) -> tuple[dict[LogicalKey, list[Row]], dict[LogicalKey, int]]:
    """Rows grouped by (group, op, seq), and each group's latency (its shortest duration); every
    row gets its latency and its wait (duration - latency)."""
    logical: defaultdict[LogicalKey, list[Row]] = defaultdict(list)
    for row in rows:
        logical[(row["group"], row["op"], row["seq"])].append(row)
    lat = {}
    for key, lst in logical.items():
        lat[key] = min(r["duration_ns"] for r in lst)
        for r in lst:
            r["latency_ns"] = lat[key]
            r["wait_ns"] = r["duration_ns"] - lat[key]
    return logical, lat


@dataclass
class _Agg:
    lat: list[int] = field(default_factory=list)
    calls: int = 0
    ranks: set[int] = field(default_factory=set)
    dtypes: set[str | None] = field(default_factory=set)


def _summarize(logical: dict[LogicalKey, list[Row]], lat: dict[LogicalKey, int], with_caller: bool) -> list[Row]:
    """The summary (or by_caller) table: one row per (op, bytes, group size[, caller])."""
    agg: defaultdict[tuple[Any, ...], _Agg] = defaultdict(_Agg)
    for key, lst in logical.items():
        r0 = lst[0]
        sk = (r0["op"], r0["bytes"], r0["group_size"]) + ((r0["caller"],) if with_caller else ())
        for r in lst:
            assert (r["bytes"], r["group_size"]) == (r0["bytes"], r0["group_size"]), key
        a = agg[sk]
        a.lat.append(lat[key])
        a.calls += len(lst)
        a.ranks.update(r["rank"] for r in lst)
        a.dtypes.update(r["dtype"] for r in lst)
    out = []
    for sk, a in agg.items():
        op, nbytes, gsize = sk[:3]
        count = len(a.lat)
        total = sum(a.lat)
        avg = total / count
        algbw = (nbytes / avg) if (nbytes is not None and avg > 0) else None
        factor = _busbw_factor(op, gsize)
        row = {
            "op": op,
            "bytes": nbytes,
            "group_size": gsize,
            "count": count,
            "calls": a.calls,
            "ranks": len(a.ranks),
            "total_ns": total,
            "p50_ns": _num(float(numpy.median(a.lat))),
            "max_ns": max(a.lat),
            "avg_ns": avg,
            "algbw_GBps": algbw,
            "busbw_GBps": (algbw * factor) if (algbw is not None and factor is not None) else None,
            "dtype": next(iter(a.dtypes)) if len(a.dtypes) == 1 else None,
        }
        if with_caller:
            row["caller"] = sk[3]
        out.append(row)
    out.sort(key=summary_key)
    return out


def _rank_rows(procs: list[ProcCalls]) -> list[Row]:
    """The ranks table, in rank order."""
    rank_rows = []
    for pc in sorted(procs, key=lambda pc: pc.rank):
        rs = pc.rows
        rank_rows.append(
            {
                "rank": pc.rank,
                "local_rank": pc.local_rank,
                "host": pc.host,
                "report": pc.report,
                "pid": pc.pid,
                "calls": len(rs),
                # unknown when one call's size is: a sum of the known ones would pass for the whole
                "bytes": None if any(r["bytes"] is None for r in rs) else sum(r["bytes"] for r in rs),
                # time with a call in flight: calls in flight together (streams) count once
                "comm_ns": _union([_span(r) for r in rs]),
                "wait_ns": _union([(_span(r)[0], _span(r)[0] + r["wait_ns"]) for r in rs]),
                "elapsed_ns": pc.elapsed_ns,
                **({"exposed_ns": pc.exposed_ns} if pc.exposed_ns is not None else {}),
            }
        )
    return rank_rows


def _arrival(r: Row) -> int:
    """When a rank arrived at a collective: its kernels' start, else its host call's."""
    return r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"]


def _startup(logical: dict[LogicalKey, list[Row]]) -> list[LogicalKey]:
    """A collective that is every participant's first call of the job is where the ranks meet for
    the first time: its skew is their start-up, not a late rank (nsyscomm.combine.setup)."""
    first_of: dict[int, tuple[tuple[int, int], LogicalKey]] = {}
    for key, lst in logical.items():
        for r in lst:
            t = (_arrival(r), r["cpu_start"])
            if r["rank"] not in first_of or t < first_of[r["rank"]][0]:
                first_of[r["rank"]] = (t, key)
    return [key for key, lst in logical.items() if len(lst) >= 2 and all(first_of[r["rank"]][1] == key for r in lst)]


def _skew(logical: dict[LogicalKey, list[Row]], ranks: list[int], startup: list[LogicalKey]) -> dict[str, Any]:
    """Per rank: how often it came last, its arrival delays and waits (the time it was blocked, each
    interval once: calls waiting together count once); the straggler is the rank last most often
    (ties: the smallest rank)."""
    per: dict[int, dict[str, Any]] = {
        rank: {"rank": rank, "late_count": 0, "arrival_delay_ns_sum": 0, "wait_ns": 0, "instances": 0} for rank in ranks
    }
    instances = 0
    waits: dict[int, list[tuple[int, int]]] = {rank: [] for rank in ranks}
    for key, lst in logical.items():
        if len(lst) < 2 or key in startup:
            continue
        instances += 1
        arr = {r["rank"]: _arrival(r) for r in lst}
        first = min(arr.values())
        last_t = max(arr.values())
        last_rank = min(rk for rk, t in arr.items() if t == last_t)
        per[last_rank]["late_count"] += 1
        for r in lst:
            p = per[r["rank"]]
            p["arrival_delay_ns_sum"] += arr[r["rank"]] - first
            waits[r["rank"]].append((_span(r)[0], _span(r)[0] + r["wait_ns"]))
            p["instances"] += 1
    for p in per.values():
        p["wait_ns"] = _union(waits[p["rank"]])
        p["avg_arrival_delay_ns"] = (p["arrival_delay_ns_sum"] / p["instances"]) if p["instances"] else None
    straggler = None
    if instances:
        straggler = min(per.values(), key=lambda p: (-p["late_count"], p["rank"]))["rank"]
    return {"straggler_rank": straggler, "instances": instances, "per_rank": [per[k] for k in sorted(per)]}


def compute_truth(reports: list[Report], sample: str, seed: int, *, exposed: bool = True) -> dict[str, Any]:
    procs = [proc_calls(rep, proc, exposed) for rep in reports for proc in rep.procs]
    with_coll = [pc for pc in procs if pc.rows]
    rows = assign_ranks(with_coll)
    infer_seq(rows)
    logical, lat = _logical(rows)
    rank_rows = _rank_rows(with_coll)
    startup = _startup(logical)
    skew = _skew(logical, [rr["rank"] for rr in rank_rows], startup)
    out_rows = [{c: r.get(c) for c in ROW_KEYS} for r in sorted(rows, key=lambda r: (r["rank"], _arrival(r), r["op"]))]
    return {
        "schema": TRUTH_SCHEMA,
        "generator": f"nsyscomm.synth v{GENERATOR_VERSION}",
        "sample": sample,
        "seed": seed,
        "reports": [rep.name for rep in reports],
        "collectives_count": len(rows),
        "logical_count": len(logical),
        "collectives": out_rows,
        "summary": _summarize(logical, lat, False),
        "by_caller": _summarize(logical, lat, True),
        "ranks": rank_rows,
        "skew": skew,
        "startup_collectives": len(startup),
    }


def summary_key(r: Row) -> tuple[Any, ...]:
    def k(v: Any) -> tuple[int, Any]:
        return (0, "") if v is None else (1, v)

    return (r["op"], k(r["bytes"]), k(r["group_size"]), k(r.get("caller")))


def _span(row: Row) -> tuple[int, int]:
    """A call's execution span: its kernels' on a device, else its host range."""
    if row.get("gpu_start") is not None:
        return row["gpu_start"], row["gpu_end"]
    return row["cpu_start"], row["cpu_end"]


def _union(spans: list[tuple[int, int]]) -> int:
    """The length of the union of the spans."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total
