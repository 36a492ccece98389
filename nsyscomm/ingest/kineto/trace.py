"""PyTorch profiler (Kineto) JSON traces -> rows of the normalized `collectives` table.

One trace file is one rank (``distributedInfo.rank``); a job is a folder of them
(``.json`` or ``.json.gz``). What is read, per trace:

- GPU kernels whose name parses as NCCL (``nsyscomm.ingest.names.parse_kernel``), with their
  ``correlation`` linking them to the CUDA launch (``cuda_runtime`` / ``cuda_driver`` events);
  PyTorch >= 2.1 also copies the collective's metadata onto the kernel (``Collective name``,
  ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``, ``Process Group Name/Ranks``).
- CPU ranges ``nccl:*`` / ``gloo:*`` (PyTorch's record_function per collective) and
  ``record_param_comms`` (the same metadata as above, on the CPU side).
- ``distributedInfo`` (rank, world size, NCCL version, process groups).
- nsyscomm's own wrapper ranges: under torch.profiler the wrapper records a ``record_function``
  range named with its NVTX message (``nsyscomm:all_reduce|api=...``, nsyscomm/nvtx_format.py)
  around every collective. They become ``source='wrapper'`` rows exactly like the nsys wrapper
  ranges (sql/calls_nsys.sql): fields parsed by ``nvtx_format.parse``, the CPU range as
  cpu_start/end, NCCL kernels launched inside attributed to the innermost one (before any
  PyTorch range). ``nsyscomm.rank|rank=..`` annotations give the rank (before distributedInfo).
  When a trace has wrapper ranges, PyTorch ``nccl:*`` / ``gloo:*`` ranges that own no kernel are
  the same calls seen again (gloo's run on its worker threads) and are not counted; they give
  the asynchronous calls their execution span (nsyscomm.ingest.kineto.worker_spans).

A range owns a kernel when it contains the kernel's launch on the same thread (as for nsys).
Message size S follows nccl-tests (docs/architecture.md, "Message size and bus bandwidth"): all_gather = output = n x per-rank input,
reduce_scatter = input = n x per-rank output, everything else the input.

The file is read as a stream (``traceEvents`` one event at a time), so memory grows with the
number of relevant events, not with the file.
"""

from __future__ import annotations

import bisect
import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nsyscomm import duck, nvtx_format
from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.busy import busy_before
from nsyscomm.ingest.extract_type import Extract
from nsyscomm.ingest.kineto import checks as kineto_checks
from nsyscomm.ingest.kineto import worker_spans as kineto_exec
from nsyscomm.ingest.kineto.meta import int_or_none, meta_row, shape_meta
from nsyscomm.ingest.kineto.stream import iter_trace, to_ns
from nsyscomm.ingest.names import canonical_op, parse_kernel
from nsyscomm.schema import COLUMN_NAMES

TRACE_SUFFIXES = (".json", ".json.gz")
_BUDGET_EVERY = 1 << 16  # events between two checks of the kept events against the budget
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime"}
_RANGE_CATS = {"user_annotation", "cpu_op", "python_function"}  # CPU-side names we look at


def is_trace(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES)


@dataclass
class _Range:
    start: int
    end: int
    pid: int
    tid: int
    name: str
    args: dict


def _is_comm_range(name: str) -> bool:
    return name.startswith(("nccl:", "gloo:", "mpi:", "ucc:", "xccl:"))


def extract(path: str | Path, report: str | None = None) -> Extract:
    path = Path(path)
    report = report or path.name
    warnings: list[str] = []
    meta: dict = {}
    kernels, launches, ranges, params, compute = [], {}, [], [], []
    wrappers, rank_marks = [], []  # nsyscomm's record_function ranges; its rank markers (pid, fields)
    span: dict[int, list[int]] = {}
    device_span: list[int] = []  # the first start and last end of the device's kernels: part of the capture
    cpu_pids: dict[int, int] = {}  # pid -> number of CPU events
    n_events = 0
    try:
        for kind, item in limits.checked_events(iter_trace(path), path):  # types checked once, at the edge
            if kind == "meta":
                if item[0] in ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion"):
                    meta[item[0]] = item[1]
                continue
            e = item
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            n_events += 1
            if not n_events % _BUDGET_EVERY:
                kineto_checks.check_budget(path, kernels, ranges, params, wrappers, rank_marks, compute, launches)
            ts = to_ns(e.get("ts"))
            if ts is None:
                continue
            end = ts + (to_ns(e.get("dur")) or 0)
            cat = e.get("cat") or ""
            name = e.get("name") or ""
            args = e.get("args") or {}
            pid, tid = e.get("pid"), e.get("tid")
            if cat == "kernel":
                device_span[:] = [min(device_span[0], ts), max(device_span[1], end)] if device_span else [ts, end]
                if name.startswith("nccl"):
                    kernels.append((ts, end, name, kineto_checks.slim_args(args)))
                else:
                    compute.append((int_or_none(args.get("device")), ts, end))
                continue
            if cat in ("gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
                continue
            if not isinstance(pid, int) or not isinstance(tid, int):
                continue
            s = span.setdefault(pid, [ts, end])
            s[0], s[1] = min(s[0], ts), max(s[1], end)
            cpu_pids[pid] = cpu_pids.get(pid, 0) + 1
            if cat in _LAUNCH_CATS:
                corr = args.get("correlation")
                if corr is not None:
                    launches[corr] = (ts, end, pid, tid)
            elif name == "record_param_comms":
                if args.get("Collective name"):
                    params.append(_Range(ts, end, pid, tid, name, kineto_checks.slim_args(args)))
            elif cat in _RANGE_CATS and name.startswith("nsyscomm"):
                if name.startswith(nvtx_format.COLLECTIVE_PREFIX):
                    wrappers.append(_Range(ts, end, pid, tid, name, {}))  # read from its name
                elif name.startswith(nvtx_format.RANK_PREFIX + "|"):
                    rank_marks.append((ts, pid, nvtx_format.parse(name)))
            elif cat in _RANGE_CATS and _is_comm_range(name):
                ranges.append(_Range(ts, end, pid, tid, name, kineto_checks.slim_args(args)))
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error, OSError) as ex:
        raise InputError(
            f"{path}: not a readable PyTorch profiler trace ({ex}); "
            f"save one with prof.export_chrome_trace(path) or torch.profiler.tensorboard_trace_handler"
        ) from None
    if not n_events and not meta:
        raise InputError(f"{path}: no trace events; pass a PyTorch profiler (Kineto) JSON trace")
    kineto_checks.check_budget(path, kernels, ranges, params, wrappers, rank_marks, compute, launches)

    dist = kineto_checks.distributed_info(path, meta.get("distributedInfo"))
    # the rank's process: the CPU pid with most events (a trace is one process; GPU "pids" are device ids)
    main_pid = max(cpu_pids, key=cpu_pids.get) if cpu_pids else 0

    rows = _match(kernels, launches, ranges, params, main_pid, warnings, report, wrappers)
    kineto_checks.check_int64(path, rows)
    calls = pd.DataFrame(rows, columns=list(COLUMN_NAMES)).drop(
        columns=["report", "rank", "local_rank", "host", "duration_ns"]
    )
    rank = int_or_none(dist.get("rank"))
    world = int_or_none(dist.get("world_size"))
    local, host = None, None
    marks = sorted((m for m in rank_marks if int_or_none(m[2].get("rank")) is not None), key=lambda m: m[0])
    if marks:  # the wrapper's marker (the first one: later ones repeat it when a --steps window opens)
        _ts, mpid, f = marks[0]
        rank, local = int_or_none(f.get("rank")), int_or_none(f.get("local_rank"))
        world = int_or_none(f.get("world")) if int_or_none(f.get("world")) is not None else world
        host = f.get("host") or None
        if isinstance(mpid, int):
            main_pid = mpid
    for what, v, lo in (("rank", rank, 0), ("local_rank", local, 0), ("world size", world, 1)):
        if v is not None and not lo <= v <= limits.MAX_GROUP:
            raise InputError(
                f"{path}: the {what} {v} is outside {lo} to {limits.MAX_GROUP}; record the trace again "
                f"(nsyscomm run) or leave this file out"
            )
    markers = pd.DataFrame(
        {
            "pid": pd.Series([main_pid] if rank is not None else [], dtype="int64"),
            "rank": pd.Series([rank] if rank is not None else [], dtype="Int64"),
            "local_rank": pd.Series([local] * (rank is not None), dtype="Int64"),
            "world": pd.Series([world] * (rank is not None), dtype="Int64"),
            "host": pd.Series([host] * (rank is not None), dtype="object"),
        }
    )
    if rank is None:
        warnings.append(
            f"{report}: no distributedInfo.rank (nor nsyscomm rank marker) in the trace; rank taken from the file order"
        )
    if main_pid in span:
        first, last = span[main_pid]
        if device_span:  # the process's kernels ran on its device, past its last host event too
            first, last = min(first, device_span[0]), max(last, device_span[1])
        spans = pd.DataFrame({"pid": [main_pid], "first_ns": [first], "last_ns": [last]})
    else:
        spans = pd.DataFrame(
            {
                "pid": pd.Series([], dtype="int64"),
                "first_ns": pd.Series([], dtype="int64"),
                "last_ns": pd.Series([], dtype="int64"),
            }
        )
    version = dist.get("nccl_version")
    version = version if isinstance(version, (str, int)) and len(str(version)) <= 64 else None
    compute = pd.DataFrame(compute, columns=["device", "start", "end"]).assign(pid=main_pid)
    calls = duck.frame_arrow(calls)
    return Extract(
        report=report,
        path=path,
        calls=busy_before(calls, compute),
        markers=markers,
        spans=spans,
        session_start_utc_ns=None,
        nsys_version=f"kineto (NCCL {version})" if version else "kineto",
        warnings=warnings,
    )


def _innermost(index: dict, pid: int, tid: int, t: int, starts_cache: dict) -> _Range | None:
    lst = index.get((pid, tid))
    if not lst:
        return None
    starts = starts_cache[(pid, tid)]
    i = bisect.bisect_right(starts, t) - 1
    # ranges on a thread nest: walk back over the few that start before t
    for j in range(i, max(-1, i - 64), -1):
        if lst[j].end >= t:
            return lst[j]
    return None


def _index(rs: list[_Range]):
    idx: dict = {}
    for r in sorted(rs, key=lambda r: (r.start, -r.end)):
        idx.setdefault((r.pid, r.tid), []).append(r)
    return idx, {k: [r.start for r in v] for k, v in idx.items()}


def _wrapper_row(w: _Range, ks, kernel_fields) -> dict:
    """A wrapper range -> a row, field by field as sql/calls_nsys.sql reads the nsys ranges
    (empty -> NULL, numbers that do not parse -> NULL, dtype falls back to the kernel's)."""
    f = nvtx_format.parse(w.name)

    def txt(key):
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
        kf = kernel_fields(ks)
        if not row["dtype"]:
            row["dtype"] = kf["_kdtype"]
        row.update({k: v for k, v in kf.items() if not k.startswith("_")})
    return row


def _match(kernels, launches, ranges, params, main_pid, warnings, report, wrappers=()) -> list[dict]:
    r_idx, r_starts = _index(ranges)
    p_idx, p_starts = _index(params)
    w_idx, w_starts = _index(wrappers)
    owned: dict[int, list] = {}  # id(range) -> kernels
    loose = []  # kernels no range owns
    unlaunched = 0
    for k in kernels:
        ts, end, name, args = k
        launch = launches.get(args.get("correlation"))
        if launch is None:
            unlaunched += 1
            loose.append((k, None))
            continue
        # the innermost wrapper range owns the kernel, else the innermost PyTorch range (as for nsys)
        r = _innermost(w_idx, launch[2], launch[3], launch[0], w_starts) if wrappers else None
        if r is None:
            r = _innermost(r_idx, launch[2], launch[3], launch[0], r_starts)
        if r is None:
            loose.append((k, launch))
        else:
            owned.setdefault(id(r), []).append((k, launch))
    if unlaunched:
        warnings.append(
            f"{report}: {unlaunched} NCCL kernel(s) have no launch event in the trace; "
            f"counted from the kernel name alone"
        )

    def param_for(r: _Range) -> dict:
        """record_param_comms on the same thread that encloses the range or lies inside it."""
        p = _innermost(p_idx, r.pid, r.tid, r.start, p_starts)
        if p is not None and p.end >= r.start:
            return p.args
        lst = p_idx.get((r.pid, r.tid)) or []
        starts = p_starts.get((r.pid, r.tid)) or []
        i = bisect.bisect_left(starts, r.start)
        if i < len(lst) and lst[i].start <= r.end:
            return lst[i].args
        return {}

    def kernel_fields(ks) -> dict:
        ks = sorted(ks, key=lambda x: x[0][0])
        (k0, _l0) = ks[0]
        info = parse_kernel(k0[2])
        kargs = k0[3]
        return {
            "gpu_start": k0[0],
            "gpu_end": max(k[0][1] for k in ks),
            "stream": int_or_none(kargs.get("stream")),
            "device": int_or_none(kargs.get("device")),
            "kernel": k0[2].split("(", 1)[0],
            "algo": info.algo,
            "proto": info.proto,
            "kernels": len(ks),
            "kernel_ns": sum(k[0][1] - k[0][0] for k in ks),
            "_kop": info.op,
            "_kdtype": info.dtype,
            "_kargs": kargs,
        }

    rows = [_wrapper_row(w, owned.get(id(w)), kernel_fields) for w in wrappers]
    kineto_exec.apply(rows, wrappers, ranges, owned, warnings, report)  # asynchronous calls' execution
    has_kernels = bool(kernels)
    dropped = 0
    for r in ranges:
        ks = owned.get(id(r))
        if not ks and wrappers:
            continue  # the wrapper's row is this call (gloo's range runs on its worker thread)
        if not ks and r.name.startswith("nccl:") and has_kernels:
            dropped += 1  # CPU bookkeeping or a kernel outside the trace: not a call (as for nsys)
            continue
        api = r.name.split(",", 1)[0].strip()
        row = {
            "pid": main_pid if r.pid is None else r.pid,
            "tid": r.tid,
            "api": api,
            "op": canonical_op(api),
            "cpu_start": r.start,
            "cpu_end": r.end,
            "kernels": 0,
            "source": "torch_range",
        }
        kf = kernel_fields(ks) if ks else {}
        meta = {}
        if kf and kf["_kargs"].get("Collective name"):
            meta = meta_row(kf["_kargs"])
        if not meta:
            pargs = param_for(r)
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
        rows.append(row)
    if dropped:
        warnings.append(
            f"{report}: {dropped} nccl:* range(s) own no NCCL kernel in the trace "
            f"(kernels outside the capture or sampled away): not counted"
        )
    for k, launch in loose:
        ts, end, name, kargs = k
        info = parse_kernel(name)
        row = {
            "pid": main_pid,
            "tid": launch[3] if launch else None,
            "cpu_start": launch[0] if launch else None,
            "cpu_end": launch[1] if launch else None,
            "gpu_start": ts,
            "gpu_end": end,
            "stream": int_or_none(kargs.get("stream")),
            "device": int_or_none(kargs.get("device")),
            "kernel": name.split("(", 1)[0],
            "api": name.split("(", 1)[0],
            "op": info.op,
            "dtype": info.dtype,
            "algo": info.algo,
            "proto": info.proto,
            "kernels": 1,
            "kernel_ns": end - ts,
            "source": "kernel_name",
        }
        if kargs.get("Collective name"):
            meta = meta_row(kargs)
            for key, v in meta.items():
                if v is not None and key != "api":
                    row[key] = v
            row["api"] = meta["api"] or row["api"]
        rows.append(row)
    rows.sort(key=lambda r: r.get("gpu_start") if r.get("gpu_start") is not None else r.get("cpu_start") or 0)
    return rows
