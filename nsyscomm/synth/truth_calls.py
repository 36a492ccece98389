"""The synthetic ground truth's rows: one per collective call, read from the generated events as
the ingest reads an nsys report (the wrapper's ranges, the PyTorch ranges, the kernels they
launched), in plain Python. nsyscomm.synth.truth makes the figures from these rows; like it,
this module uses nothing of the code it checks (tests/synth/test_truth_independence.py)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from nsyscomm.synth.intervals import minus_len, union_len
from nsyscomm.synth.kernel_names import parse_kernel_name
from nsyscomm.synth.report import NVTX_PUSHPOP, NVTX_STARTEND, Proc, Report, pid_of, tid_of


def _text(v: object) -> str | None:
    """A field as the message carries it (lists comma-joined), None when empty."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        v = ",".join(str(x) for x in v)
    v = str(v)
    return v or None


_TORCH_RANGE = re.compile(r"^nccl:([a-z_]+)(,|$)")

# One collective row of the truth (the keys of ROW_KEYS plus working fields); one generated
# event (an NVTX range, a runtime call, a kernel) as Report holds it.
Row = dict[str, Any]
Event = dict[str, Any]
# A logical collective's key: (group, op, seq).
LogicalKey = tuple[Any, str, Any]


@dataclass
class ProcCalls:
    """One process's collective rows and the figures measured on its own timeline."""

    report: str
    pid: int
    marker: dict[str, Any] | None
    rows: list[Row]
    elapsed_ns: int
    exposed_ns: int | None
    rank: int = -1
    local_rank: int | None = None
    host: str | None = None


def _is_range(e: Event) -> bool:
    return e["eventType"] in (NVTX_PUSHPOP, NVTX_STARTEND)


def _launched_inside(call: Event | None, e: Event) -> bool:
    """The launch call ran inside the range ``e``, on its thread."""
    return (
        call is not None
        and call["globalTid"] == e["globalTid"]
        and e["start"] <= call["start"]
        and call["end"] <= e["end"]
    )


def _wrapper_rows(nv: list[Event], by_corr: dict[int, Event], nccl: list[Event]) -> tuple[list[Row], set[int]]:
    """One row per wrapper range, with the NCCL kernels launched inside it; the ids of the
    kernels so claimed."""
    rows, claimed = [], set()
    for e in nv:
        f = e["call"]
        if not _is_range(e) or f is None:
            continue
        mine = []
        for k in nccl:
            if _launched_inside(by_corr.get(k["correlationId"]), e):
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
        rows.append(row)
    return rows, claimed


def _torch_range_around(nv: list[Event], call: Event) -> tuple[Event, str] | None:
    """The innermost PyTorch ``nccl:<op>`` range enclosing the launch call, with its op."""
    enclosing = []
    for e in nv:
        m = _TORCH_RANGE.match(e["text"]) if (_is_range(e) and e["text"] is not None) else None
        if m and _launched_inside(call, e):
            enclosing.append((e, m.group(1)))
    if not enclosing:
        return None
    return max(enclosing, key=lambda em: (em[0]["start"], -em[0]["end"]))


def _kernel_row(nv: list[Event], call: Event | None, k: Event) -> Row:
    """The row of an NCCL kernel no wrapper range claimed."""
    info = parse_kernel_name(k["name"])
    op, source = info["op"], "kernel_name"
    cpu: tuple[int, int] | None = None
    tid = None
    if call is not None:
        tid = tid_of(call["globalTid"])
        cpu = (call["start"], call["end"])
        around = _torch_range_around(nv, call)
        if around is not None:
            inner, inner_op = around
            source = "torch_range"
            cpu = (inner["start"], inner["end"])
            if info["op"] == "send":  # SendRecv takes the PyTorch op
                op = inner_op
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
    return row


def proc_calls(rep: Report, proc: Proc, exposed: bool) -> ProcCalls:
    nv = [e for e in rep.nvtx if pid_of(e["globalTid"]) == proc.pid]
    rt = [r for r in rep.runtime if pid_of(r["globalTid"]) == proc.pid]
    ks = [k for k in rep.kernels if k["globalPid"] == proc.gpid]
    by_corr = {r["correlationId"]: r for r in rt}
    assert len(by_corr) == len(rt), "correlation ids are unique within a process"
    marker = None
    for e in nv:
        if e["marker"] is not None:
            marker = e["marker"]
    nccl = [k for k in ks if k["name"].startswith("nccl")]
    rows, claimed = _wrapper_rows(nv, by_corr, nccl)
    rows += [_kernel_row(nv, by_corr.get(k["correlationId"]), k) for k in nccl if id(k) not in claimed]
    for row in rows:
        row.update(report=rep.name, pid=proc.pid)
    ends = (
        [e["end"] if e["end"] is not None else e["start"] for e in nv] + [r["end"] for r in rt] + [k["end"] for k in ks]
    )
    starts = [e["start"] for e in nv] + [r["start"] for r in rt] + [k["start"] for k in ks]
    elapsed = (max(ends) - min(starts)) if starts else 0
    comp = [(k["start"], k["end"]) for k in ks if not k["name"].startswith("nccl")]
    comm = [(k["start"], k["end"]) for k in nccl]
    exposed_ns = minus_len(comm, comp) if (ks and exposed) else None
    if exposed and not ks and rows:
        # no kernels (gloo, MPI): the samples' calls are synchronous, their caller blocked for the
        # whole call, so every moment of them is exposed (docs/architecture.md, "Timing model")
        exposed_ns = union_len((r["cpu_start"], r["cpu_end"]) for r in rows if r["cpu_start"] is not None)
    return ProcCalls(rep.name, proc.pid, marker, rows, elapsed, exposed_ns)


def assign_ranks(procs: list[ProcCalls]) -> list[Row]:
    """Ranks from the markers, then the unmarked processes in (report, pid) order; the rows of
    every process with collectives, each with its rank."""
    marked = [pc for pc in procs if pc.marker]
    for pc in marked:
        m = pc.marker
        assert m is not None
        pc.rank, pc.local_rank, pc.host = m["rank"], m["local_rank"], _text(m["host"])
    nxt = max((pc.rank for pc in marked), default=-1) + 1
    for pc in sorted((pc for pc in procs if not pc.marker), key=lambda pc: (pc.report, pc.pid)):
        pc.rank, pc.local_rank, pc.host = nxt, None, None
        nxt += 1
    rows = []
    for pc in procs:
        for row in pc.rows:
            row.update(rank=pc.rank, local_rank=pc.local_rank, host=pc.host)
            rows.append(row)
    return rows


def infer_seq(rows: list[Row]) -> None:
    """Rows without the wrapper: seq is their order per (rank, op) on the device, and the group
    size the number of ranks sharing (op, seq)."""
    by_rank_op: defaultdict[tuple[int, str], list[Row]] = defaultdict(list)
    for row in rows:
        if row["source"] != "wrapper":
            by_rank_op[(row["rank"], row["op"])].append(row)
    for lst in by_rank_op.values():
        lst.sort(key=lambda r: (r["gpu_start"], r["gpu_end"]))
        for i, row in enumerate(lst):
            row["seq"] = i
    share: defaultdict[tuple[str, int], set[int]] = defaultdict(set)
    for row in rows:
        if row["source"] != "wrapper":
            share[(row["op"], row["seq"])].add(row["rank"])
    for row in rows:
        if row["source"] != "wrapper":
            row["group_size"] = len(share[(row["op"], row["seq"])])


ROW_KEYS = (
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


def _fill_gpu(row: Row, ks: list[Event]) -> None:
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
