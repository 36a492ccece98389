"""The calls of one PyTorch profiler (Kineto) trace, from the events its reader kept
(nsyscomm.ingest.kineto.trace): which range owns each NCCL kernel (the innermost wrapper range
containing its launch on the same thread, else the innermost PyTorch range, as for nsys), and one
row per call with the metadata each source gives (the wrapper's message, the kernel's copy of
the collective's metadata, record_param_comms, record_shapes), as the collectives table has it."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from nsyscomm import nvtx_format
from nsyscomm.ingest.kineto import copies as kineto_copies
from nsyscomm.ingest.kineto import worker_spans as kineto_exec
from nsyscomm.ingest.kineto.meta import int_or_none, meta_row, shape_meta
from nsyscomm.ingest.names import canonical_op, parse_kernel


@dataclass
class Range:
    start: int
    end: int
    pid: int
    tid: int
    name: str
    args: dict


class Kernel(NamedTuple):
    start: int
    end: int
    name: str
    args: dict


class Launch(NamedTuple):
    """The CPU call that launched a kernel (cuda_runtime / cuda_driver)."""

    start: int
    end: int
    pid: int
    tid: int


Owned = tuple[Kernel, Launch]  # a kernel a range owns, with its launch
Loose = tuple[Kernel, "Launch | None"]  # a kernel no range owns, with its launch where known


class Kept(Protocol):
    """The events of a trace the rows are made from (nsyscomm.ingest.kineto.trace keeps them)."""

    kernels: list[Kernel]
    launches: dict[Any, Launch]
    ranges: list[Range]  # PyTorch's nccl:* / gloo:* ranges
    params: list[Range]  # record_param_comms
    wrappers: list[Range]  # nsyscomm's record_function ranges
    copies: list[kineto_copies.Copy]  # device-to-device copies


_Index = tuple[dict[tuple[int, int], list[Range]], dict[tuple[int, int], list[int]]]


def _innermost(index: _Index, pid: int, tid: int, t: int) -> Range | None:
    by_thread, starts_of = index
    lst = by_thread.get((pid, tid))
    if not lst:
        return None
    i = bisect.bisect_right(starts_of[(pid, tid)], t) - 1
    # ranges on a thread nest: walk back over the few that start before t
    for j in range(i, max(-1, i - 64), -1):
        if lst[j].end >= t:
            return lst[j]
    return None


def _index(rs: Iterable[Range]) -> _Index:
    idx: dict[tuple[int, int], list[Range]] = {}
    for r in sorted(rs, key=lambda r: (r.start, -r.end)):
        idx.setdefault((r.pid, r.tid), []).append(r)
    return idx, {k: [r.start for r in v] for k, v in idx.items()}


def _wrapper_row(w: Range, ks: list[Owned] | None) -> dict:
    """A wrapper range -> a row, field by field as sql/calls_nsys.sql reads the nsys ranges
    (empty -> NULL, numbers that do not parse -> NULL, dtype falls back to the kernel's)."""
    f = nvtx_format.parse(w.name)

    def txt(key: str) -> str | None:
        v = f.get(key)
        return v if v else None

    row = {
        "pid": w.pid,
        "tid": w.tid,
        "op": f["kind"][len(nvtx_format.COLLECTIVE_PREFIX) :] or None,
        "api": txt("api"),
        "bytes": int_or_none(f.get("bytes")),
        "dtype": txt("dtype"),
        "numel": int_or_none(f.get("numel")),
        "group": txt("pg"),
        "group_size": int_or_none(f.get("gsize")),
        "group_ranks": txt("granks"),
        "seq": int_or_none(f.get("seq")),
        "caller": txt("caller"),
        "step": int_or_none(f.get("step")),
        "peer": int_or_none(f.get("peer")),
        "cpu_start": w.start,
        "cpu_end": w.end,
        "kernels": 0,
        "kernel_ns": 0,
        "source": "wrapper",
    }
    if ks:
        kf = _kernel_fields(ks)
        if not row["dtype"]:
            row["dtype"] = kf["_kdtype"]
        row.update({k: v for k, v in kf.items() if not k.startswith("_")})
    return row


def _owners(kept: Kept, r_idx: _Index, warnings: list[str], report: str) -> tuple[dict[int, list[Owned]], list[Loose]]:
    """Each NCCL kernel's owner: the innermost wrapper range containing its launch on the same
    thread, else the innermost PyTorch range (as for nsys). Returns id(range) -> its kernels, and
    the kernels no range owns."""
    w_idx = _index(kept.wrappers)
    owned: dict[int, list[Owned]] = {}
    loose: list[Loose] = []
    unlaunched = 0
    for k in kept.kernels:
        launch = kept.launches.get(k.args.get("correlation"))
        if launch is None:
            unlaunched += 1
            loose.append((k, None))
            continue
        r = _innermost(w_idx, launch.pid, launch.tid, launch.start) if kept.wrappers else None
        if r is None:
            r = _innermost(r_idx, launch.pid, launch.tid, launch.start)
        if r is None:
            loose.append((k, launch))
        else:
            owned.setdefault(id(r), []).append((k, launch))
    if unlaunched:
        warnings.append(
            f"{report}: {unlaunched} NCCL kernel(s) have no launch event in the trace; "
            f"counted from the kernel name alone"
        )
    return owned, loose


def _param_for(p_idx: _Index, r: Range) -> dict:
    """record_param_comms on the same thread that encloses the range or lies inside it."""
    p = _innermost(p_idx, r.pid, r.tid, r.start)
    if p is not None and p.end >= r.start:
        return p.args
    lst = p_idx[0].get((r.pid, r.tid)) or []
    starts = p_idx[1].get((r.pid, r.tid)) or []
    i = bisect.bisect_left(starts, r.start)
    if i < len(lst) and lst[i].start <= r.end:
        return lst[i].args
    return {}


def _kernel_fields(ks: list[Owned]) -> dict:
    """The row fields a call's kernels give (the first kernel names it); the keys starting with
    "_" are for the caller only."""
    ks = sorted(ks, key=lambda x: x[0].start)
    k0 = ks[0][0]
    info = parse_kernel(k0.name)
    return {
        "gpu_start": k0.start,
        "gpu_end": max(k.end for k, _launch in ks),
        "stream": int_or_none(k0.args.get("stream")),
        "device": int_or_none(k0.args.get("device")),
        "kernel": k0.name.split("(", 1)[0],
        "algo": info.algo,
        "proto": info.proto,
        "kernels": len(ks),
        "kernel_ns": sum(k.end - k.start for k, _launch in ks),
        "_kop": info.op,
        "_kdtype": info.dtype,
        "_kargs": k0.args,
    }


def _range_row(r: Range, ks: list[Owned] | None, main_pid: int, p_idx: _Index) -> dict:
    """A PyTorch nccl:* / gloo:* range -> a row; its metadata from the kernel's args, else from
    record_param_comms, else from record_shapes."""
    api = r.name.split(",", 1)[0].strip()
    row: dict[str, Any] = {
        "pid": main_pid if r.pid is None else r.pid,
        "tid": r.tid,
        "api": api,
        "op": canonical_op(api),
        "cpu_start": r.start,
        "cpu_end": r.end,
        "kernels": 0,
        "source": "torch_range",
    }
    kf = _kernel_fields(ks) if ks else {}
    meta = {}
    if kf and kf["_kargs"].get("Collective name"):
        meta = meta_row(kf["_kargs"])
    if not meta:
        pargs = _param_for(p_idx, r)
        if pargs:
            meta = meta_row(pargs)
    if not meta:
        meta = shape_meta(row["op"], r.args)
    for key, v in meta.items():
        if v is not None and key not in ("op", "api"):
            row[key] = v
    if row["op"] is None:
        row["op"] = meta.get("op") or kf.get("_kop")
    if not row.get("dtype") and kf:
        row["dtype"] = kf["_kdtype"]
    row.update({k: v for k, v in kf.items() if not k.startswith("_")})
    return row


def _loose_row(k: Kernel, launch: Launch | None, main_pid: int) -> dict:
    """A kernel no range owns -> a row of its own, named by the kernel (and its args' metadata)."""
    info = parse_kernel(k.name)
    row = {
        "pid": main_pid,
        "tid": launch.tid if launch else None,
        "cpu_start": launch.start if launch else None,
        "cpu_end": launch.end if launch else None,
        "gpu_start": k.start,
        "gpu_end": k.end,
        "stream": int_or_none(k.args.get("stream")),
        "device": int_or_none(k.args.get("device")),
        "kernel": k.name.split("(", 1)[0],
        "api": k.name.split("(", 1)[0],
        "op": info.op,
        "dtype": info.dtype,
        "algo": info.algo,
        "proto": info.proto,
        "kernels": 1,
        "kernel_ns": k.end - k.start,
        "source": "kernel_name",
    }
    if k.args.get("Collective name"):
        meta = meta_row(k.args)
        for key, v in meta.items():
            if v is not None and key != "api":
                row[key] = v
        row["api"] = meta["api"] or row["api"]
    return row


def _row_time(row: dict) -> int:
    t = row.get("gpu_start")
    if t is None:
        t = row.get("cpu_start")
    return t or 0


def match(kept: Kept, main_pid: int, warnings: list[str], report: str) -> list[dict]:
    """The calls of one trace: the wrapper's ranges, the PyTorch ranges that are calls of their
    own, and the kernels no range owns; in order of their start."""
    r_idx = _index(kept.ranges)
    owned, loose = _owners(kept, r_idx, warnings, report)
    rows = [_wrapper_row(w, owned.get(id(w))) for w in kept.wrappers]
    kineto_exec.apply(rows, kept.wrappers, kept.ranges, owned, warnings, report)  # asynchronous calls' execution
    p_idx = _index(kept.params)
    dropped = 0
    for r in kept.ranges:
        ks = owned.get(id(r))
        if not ks and kept.wrappers:
            continue  # the wrapper's row is this call (gloo's range runs on its worker thread)
        if not ks and r.name.startswith("nccl:") and kept.kernels:
            dropped += 1  # CPU bookkeeping or a kernel outside the trace: not a call (as for nsys)
            continue
        rows.append(_range_row(r, ks, main_pid, p_idx))
    if dropped:
        warnings.append(
            f"{report}: {dropped} nccl:* range(s) own no NCCL kernel in the trace "
            f"(kernels outside the capture or sampled away): not counted"
        )
    rows.extend(_loose_row(k, launch, main_pid) for k, launch in loose)
    kineto_copies.apply(rows, kept.copies, kept.launches)  # one-rank calls: their device copies
    rows.sort(key=_row_time)
    return rows
