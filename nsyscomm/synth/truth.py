"""Ground truth, in plain Python from the generated events (never by running nsyscomm's SQL): the
rules the ingest and the analyses implement (the package docstring).

Nothing here comes from the code under test: a collective's fields and a rank marker's are the
values the generator put into the message (``Report.range(call=..., marker=...)``), never the
message parsed back, and the bus-bandwidth factors are written out below from their definition.
tests/synth/test_truth_independence.py keeps it so."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy

from nsyscomm.synth.intervals import minus_len
from nsyscomm.synth.kernel_names import parse_kernel_name
from nsyscomm.synth.report import (
    GENERATOR_VERSION,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    TRUTH_SCHEMA,
    Report,
    pid_of,
    tid_of,
)

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


def _text(v) -> str | None:
    """A field as the message carries it (lists comma-joined), None when empty."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        v = ",".join(str(x) for x in v)
    v = str(v)
    return v or None


# ---------------------------------------------------------------------------------------
# Ground truth (plain Python, from the generated events)
# ---------------------------------------------------------------------------------------

_TORCH_RANGE = re.compile(r"^nccl:([a-z_]+)(,|$)")


def _num(x):
    """int when integral (p50 may be .5)."""
    x = float(x)
    return int(x) if x.is_integer() else x


def compute_truth(reports: list[Report], sample: str, seed: int, *, exposed: bool = True) -> dict:
    rows = []
    proc_info = []  # (report, proc, marker, events)
    for rep in reports:
        for proc in rep.procs:
            nv = [e for e in rep.nvtx if pid_of(e["globalTid"]) == proc.pid]
            rt = [r for r in rep.runtime if pid_of(r["globalTid"]) == proc.pid]
            ks = [k for k in rep.kernels if k["globalPid"] == proc.gpid]
            by_corr = {r["correlationId"]: r for r in rt}
            assert len(by_corr) == len(rt), "correlation ids are unique within a process"
            marker = None
            wrapper_rows = []
            claimed = set()
            nccl = [k for k in ks if k["name"].startswith("nccl")]
            for e in nv:
                if e["marker"] is not None:
                    marker = e["marker"]
                f = e["call"]
                if e["eventType"] not in (NVTX_PUSHPOP, NVTX_STARTEND) or f is None:
                    continue
                mine = []
                for k in nccl:
                    call = by_corr.get(k["correlationId"])
                    if (
                        call
                        and call["globalTid"] == e["globalTid"]
                        and e["start"] <= call["start"]
                        and call["end"] <= e["end"]
                    ):
                        mine.append(k)
                        claimed.add(id(k))
                mine.sort(key=lambda k: (k["start"], k["end"]))
                row = {
                    "op": f["op"],
                    "api": _text(f["api"]),
                    "bytes": f["bytes"],
                    "dtype": _text(f["dtype"]),
                    "numel": f["numel"],
                    "group": _text(f["pg"]),
                    "group_size": f["gsize"],
                    "group_ranks": _text(f.get("granks")),
                    "seq": f["seq"],
                    "caller": _text(f.get("caller")),
                    "step": f.get("step"),
                    "cpu_start": e["start"],
                    "cpu_end": e["end"],
                    "tid": tid_of(e["globalTid"]),
                    "source": "wrapper",
                }
                _fill_gpu(row, mine)
                wrapper_rows.append(row)
            kernel_rows = []
            for k in nccl:
                if id(k) in claimed:
                    continue
                info = parse_kernel_name(k["name"])
                call = by_corr.get(k["correlationId"])
                op, source, cpu = info["op"], "kernel_name", None
                tid = None
                if call is not None:
                    tid = tid_of(call["globalTid"])
                    cpu = (call["start"], call["end"])
                    enclosing = [
                        e
                        for e in nv
                        if e["eventType"] in (NVTX_PUSHPOP, NVTX_STARTEND)
                        and e["globalTid"] == call["globalTid"]
                        and e["text"] is not None
                        and _TORCH_RANGE.match(e["text"])
                        and e["start"] <= call["start"]
                        and call["end"] <= e["end"]
                    ]
                    if enclosing:
                        inner = max(enclosing, key=lambda e: (e["start"], -e["end"]))
                        source = "torch_range"
                        cpu = (inner["start"], inner["end"])
                        if info["op"] == "send":  # SendRecv takes the PyTorch op
                            op = _TORCH_RANGE.match(inner["text"]).group(1)
                row = {
                    "op": op,
                    "api": None,
                    "bytes": None,
                    "dtype": info["dtype"],
                    "numel": None,
                    "group": None,
                    "group_size": None,
                    "group_ranks": None,
                    "seq": None,
                    "caller": None,
                    "step": None,
                    "cpu_start": cpu[0] if cpu else None,
                    "cpu_end": cpu[1] if cpu else None,
                    "tid": tid,
                    "source": source,
                }
                _fill_gpu(row, [k])
                kernel_rows.append(row)
            for row in wrapper_rows + kernel_rows:
                row.update(report=rep.name, pid=proc.pid)
            ends = (
                [e["end"] if e["end"] is not None else e["start"] for e in nv]
                + [r["end"] for r in rt]
                + [k["end"] for k in ks]
            )
            starts = [e["start"] for e in nv] + [r["start"] for r in rt] + [k["start"] for k in ks]
            elapsed = (max(ends) - min(starts)) if starts else 0
            comp = [(k["start"], k["end"]) for k in ks if not k["name"].startswith("nccl")]
            comm = [(k["start"], k["end"]) for k in nccl]
            exposed_ns = minus_len(comm, comp) if (ks and exposed) else None
            proc_info.append(
                {
                    "report": rep.name,
                    "proc": proc,
                    "marker": marker,
                    "rows": wrapper_rows + kernel_rows,
                    "elapsed_ns": elapsed,
                    "exposed_ns": exposed_ns,
                }
            )

    # ranks
    with_coll = [pi for pi in proc_info if pi["rows"]]
    marked = [pi for pi in with_coll if pi["marker"]]
    for pi in marked:
        m = pi["marker"]
        pi["rank"], pi["local_rank"], pi["host"] = m["rank"], m["local_rank"], _text(m["host"])
    nxt = max((pi["rank"] for pi in marked), default=-1) + 1
    for pi in sorted((pi for pi in with_coll if not pi["marker"]), key=lambda pi: (pi["report"], pi["proc"].pid)):
        pi["rank"], pi["local_rank"], pi["host"] = nxt, None, None
        nxt += 1
    for pi in with_coll:
        for row in pi["rows"]:
            row.update(rank=pi["rank"], local_rank=pi["local_rank"], host=pi["host"])
            rows.append(row)

    # seq and inferred group size for rows without wrapper
    by_rank_op = defaultdict(list)
    for row in rows:
        if row["source"] != "wrapper":
            by_rank_op[(row["rank"], row["op"])].append(row)
    for lst in by_rank_op.values():
        lst.sort(key=lambda r: (r["gpu_start"], r["gpu_end"]))
        for i, row in enumerate(lst):
            row["seq"] = i
    share = defaultdict(set)
    for row in rows:
        if row["source"] != "wrapper":
            share[(row["op"], row["seq"])].add(row["rank"])
    for row in rows:
        if row["source"] != "wrapper":
            row["group_size"] = len(share[(row["op"], row["seq"])])

    # logical collectives
    logical = defaultdict(list)
    for row in rows:
        logical[(row["group"], row["op"], row["seq"])].append(row)
    lat = {}
    for key, lst in logical.items():
        lat[key] = min(r["duration_ns"] for r in lst)
        for r in lst:
            r["latency_ns"] = lat[key]
            r["wait_ns"] = r["duration_ns"] - lat[key]

    def summarize(with_caller):
        agg = defaultdict(lambda: {"lat": [], "calls": 0, "ranks": set(), "dtypes": set()})
        for key, lst in logical.items():
            r0 = lst[0]
            sk = (r0["op"], r0["bytes"], r0["group_size"]) + ((r0["caller"],) if with_caller else ())
            for r in lst:
                assert (r["bytes"], r["group_size"]) == (r0["bytes"], r0["group_size"]), key
            a = agg[sk]
            a["lat"].append(lat[key])
            a["calls"] += len(lst)
            a["ranks"].update(r["rank"] for r in lst)
            a["dtypes"].update(r["dtype"] for r in lst)
        out = []
        for sk, a in agg.items():
            op, nbytes, gsize = sk[:3]
            count = len(a["lat"])
            total = sum(a["lat"])
            avg = total / count
            algbw = (nbytes / avg) if (nbytes is not None and avg > 0) else None
            factor = _busbw_factor(op, gsize)
            row = {
                "op": op,
                "bytes": nbytes,
                "group_size": gsize,
                "count": count,
                "calls": a["calls"],
                "ranks": len(a["ranks"]),
                "total_ns": total,
                "p50_ns": _num(numpy.median(a["lat"])),
                "max_ns": max(a["lat"]),
                "avg_ns": avg,
                "algbw_GBps": algbw,
                "busbw_GBps": (algbw * factor) if (algbw is not None and factor is not None) else None,
                "dtype": next(iter(a["dtypes"])) if len(a["dtypes"]) == 1 else None,
            }
            if with_caller:
                row["caller"] = sk[3]
            out.append(row)
        out.sort(key=summary_key)
        return out

    # ranks table
    rank_rows = []
    for pi in sorted(with_coll, key=lambda pi: pi["rank"]):
        rs = pi["rows"]
        rank_rows.append(
            {
                "rank": pi["rank"],
                "local_rank": pi["local_rank"],
                "host": pi["host"],
                "report": pi["report"],
                "pid": pi["proc"].pid,
                "calls": len(rs),
                "bytes": sum(r["bytes"] or 0 for r in rs),
                # time with a call in flight: calls in flight together (streams) count once
                "comm_ns": _union([_span(r) for r in rs]),
                "wait_ns": _union([(_span(r)[0], _span(r)[0] + r["wait_ns"]) for r in rs]),
                "elapsed_ns": pi["elapsed_ns"],
                **({"exposed_ns": pi["exposed_ns"]} if pi["exposed_ns"] is not None else {}),
            }
        )

    # skew
    per = {
        rr["rank"]: {"rank": rr["rank"], "late_count": 0, "arrival_delay_ns_sum": 0, "wait_ns": 0, "instances": 0}
        for rr in rank_rows
    }
    # a collective that is every participant's first call of the job is where the ranks meet for
    # the first time: its skew is their start-up, not a late rank (nsyscomm.combine.setup)
    first_of: dict = {}
    for key, lst in logical.items():
        for r in lst:
            t = (r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"], r["cpu_start"])
            if r["rank"] not in first_of or t < first_of[r["rank"]][0]:
                first_of[r["rank"]] = (t, key)
    startup = [key for key, lst in logical.items() if len(lst) >= 2 and all(first_of[r["rank"]][1] == key for r in lst)]
    instances = 0
    for key, lst in logical.items():
        if len(lst) < 2 or key in startup:
            continue
        instances += 1
        arr = {r["rank"]: (r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"]) for r in lst}
        first = min(arr.values())
        last_t = max(arr.values())
        last_rank = min(rk for rk, t in arr.items() if t == last_t)
        per[last_rank]["late_count"] += 1
        for r in lst:
            p = per[r["rank"]]
            p["arrival_delay_ns_sum"] += arr[r["rank"]] - first
            p["wait_ns"] += r["wait_ns"]
            p["instances"] += 1
    for p in per.values():
        p["avg_arrival_delay_ns"] = (p["arrival_delay_ns_sum"] / p["instances"]) if p["instances"] else None
    straggler = None
    if instances:
        straggler = min(per.values(), key=lambda p: (-p["late_count"], p["rank"]))["rank"]

    out_rows = []
    for r in sorted(
        rows, key=lambda r: (r["rank"], r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"], r["op"])
    ):
        out_rows.append({c: r.get(c) for c in _ROW_KEYS})
    return {
        "schema": TRUTH_SCHEMA,
        "generator": f"nsyscomm.synth v{GENERATOR_VERSION}",
        "sample": sample,
        "seed": seed,
        "reports": [rep.name for rep in reports],
        "collectives_count": len(rows),
        "logical_count": len(logical),
        "collectives": out_rows,
        "summary": summarize(False),
        "by_caller": summarize(True),
        "ranks": rank_rows,
        "skew": {"straggler_rank": straggler, "instances": instances, "per_rank": [per[k] for k in sorted(per)]},
        "startup_collectives": len(startup),
    }


_ROW_KEYS = (
    "report",
    "rank",
    "local_rank",
    "host",
    "pid",
    "tid",
    "op",
    "api",
    "bytes",
    "dtype",
    "numel",
    "group",
    "group_size",
    "group_ranks",
    "seq",
    "caller",
    "step",
    "cpu_start",
    "cpu_end",
    "gpu_start",
    "gpu_end",
    "stream",
    "device",
    "duration_ns",
    "source",
    "kernel",
    "algo",
    "proto",
    "kernels",
    "kernel_ns",
    "latency_ns",
    "wait_ns",
)


def _fill_gpu(row, ks):
    if ks:
        k0 = ks[0]
        info = parse_kernel_name(k0["name"])
        row.update(
            gpu_start=min(k["start"] for k in ks),
            gpu_end=max(k["end"] for k in ks),
            stream=k0["streamId"],
            device=k0["deviceId"],
            kernel=k0["name"],
            algo=info["algo"],
            proto=info["proto"],
            kernels=len(ks),
            kernel_ns=sum(k["end"] - k["start"] for k in ks),
        )
        row["duration_ns"] = row["gpu_end"] - row["gpu_start"]
    else:
        row.update(
            gpu_start=None,
            gpu_end=None,
            stream=None,
            device=None,
            kernel=None,
            algo=None,
            proto=None,
            kernels=0,
            kernel_ns=0,
        )
        row["duration_ns"] = row["cpu_end"] - row["cpu_start"]


def summary_key(r: dict) -> tuple:
    def k(v):
        return (0, "") if v is None else (1, v)

    return (r["op"], k(r["bytes"]), k(r["group_size"]), k(r.get("caller")))


def _span(row: dict) -> tuple[int, int]:
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
