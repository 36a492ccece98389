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
  the same calls seen again (gloo's run on its worker threads) and are not counted.

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
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nsyscomm import duck, nvtx_format
from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.busy import busy_before
from nsyscomm.ingest.names import canonical_op, parse_kernel
from nsyscomm.ingest.nsys.extract import Extract
from nsyscomm.schema import COLUMN_NAMES

# c10 ScalarType names (as in record_param_comms' "dtype") and record_shapes' "Input type"
# spellings -> (torch spelling, bytes per element)
DTYPES = {
    "Float": ("float32", 4),
    "float": ("float32", 4),
    "Double": ("float64", 8),
    "double": ("float64", 8),
    "Half": ("float16", 2),
    "c10::Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "c10::BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "Int": ("int32", 4),
    "int": ("int32", 4),
    "Short": ("int16", 2),
    "short": ("int16", 2),
    "Char": ("int8", 1),
    "signed char": ("int8", 1),
    "Byte": ("uint8", 1),
    "unsigned char": ("uint8", 1),
    "Bool": ("bool", 1),
    "bool": ("bool", 1),
    "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
    "UInt16": ("uint16", 2),
    "UInt32": ("uint32", 4),
    "UInt64": ("uint64", 8),
}
_TORCH_SIZES = {v[0]: v[1] for v in DTYPES.values()} | {"float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}

TRACE_SUFFIXES = (".json", ".json.gz")
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime"}
_RANGE_CATS = {"user_annotation", "cpu_op", "python_function"}  # CPU-side names we look at
_META_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Process Group Description",
    "Seq",
    "Root",
)


def is_trace(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES)


# --------------------------------------------------------------------------- streaming JSON


class _Num(float):
    """A JSON float that remembers its text, so µs timestamps convert to ns without rounding."""

    __slots__ = ("text",)

    def __new__(cls, text: str):
        f = float.__new__(cls, text)
        f.text = text
        return f


def to_ns(us) -> int | None:
    """Kineto µs (int, float or _Num) -> integer ns, exact for the decimal text in the file."""
    if us is None:
        return None
    if isinstance(us, int):
        return us * 1000
    text = getattr(us, "text", None)
    if text is not None and "e" not in text.lower():
        neg = text.startswith("-")
        whole, _, frac = text.lstrip("-").partition(".")
        frac = (frac + "000")[:4]  # ns digits + one to round half up
        ns = int(whole or 0) * 1000 + int(frac[:3])
        if int(frac[3]) >= 5:
            ns += 1
        return -ns if neg else ns
    if isinstance(us, float) and math.isfinite(us):
        return int(round(us * 1000))
    return None


def _open_text(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")


def iter_trace(path: Path, chunk: int = 1 << 20):
    """Stream a Chrome/Kineto trace: yields ("event", dict) for every traceEvents element and
    ("meta", (key, value)) for every other top-level key. A bare JSON array of events works too."""
    dec = json.JSONDecoder(parse_float=_Num)
    ws = " \t\r\n"
    with _open_text(path) as f:
        buf, pos, eof = "", 0, False

        def more() -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            data = f.read(chunk)
            if not data:
                eof = True
                return False
            buf = buf[pos:] + data
            pos = 0
            return True

        def skip_ws():
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in ws:
                    pos += 1
                if pos < len(buf) or not more():
                    return

        def peek() -> str:
            skip_ws()
            return buf[pos] if pos < len(buf) else ""

        def value():
            nonlocal pos
            skip_ws()
            while True:
                try:
                    v, end = dec.raw_decode(buf, pos)
                    # a number at the end of the buffer may continue in the next chunk
                    if end == len(buf) and not eof and isinstance(v, (int, float)):
                        raise json.JSONDecodeError("number at chunk end", buf, pos)
                    pos = end
                    return v
                except json.JSONDecodeError:
                    if not more():
                        raise

        def expect(ch: str):
            nonlocal pos
            if peek() != ch:
                raise json.JSONDecodeError(f"expected {ch!r}", buf, pos)
            pos += 1

        def events():
            nonlocal pos
            expect("[")
            if peek() == "]":
                pos += 1
                return
            while True:
                yield value()
                c = peek()
                pos += 1
                if c == "]":
                    return
                if c != ",":
                    raise json.JSONDecodeError("expected ',' or ']' in traceEvents", buf, pos)

        first = peek()
        if first == "[":
            for e in events():
                yield "event", e
            return
        expect("{")
        if peek() == "}":
            return
        while True:
            key = value()
            expect(":")
            if key == "traceEvents" and peek() == "[":
                for e in events():
                    yield "event", e
            else:
                yield "meta", (key, value())
            c = peek()
            pos += 1
            if c == "}":
                return
            if c != ",":
                raise json.JSONDecodeError("expected ',' or '}' at top level", buf, pos)


# --------------------------------------------------------------------------- metadata -> S


def _dtype(raw) -> tuple[str | None, int | None]:
    if raw is None:
        return None, None
    raw = str(raw)
    if raw in DTYPES:
        return DTYPES[raw]
    low = raw.lower().replace("torch.", "")
    if low in _TORCH_SIZES:
        return low, _TORCH_SIZES[low]
    return raw, None


def _int(v) -> int | None:
    try:
        if v is None or v == "":
            return None
        return int(v)
    except (TypeError, ValueError):
        return None


def message_size(op: str | None, in_nelems, out_nelems, typesize, group_size) -> tuple[int | None, int | None]:
    """(S bytes, numel) in nccl-tests terms from PyTorch's In/Out msg nelems (per rank).

    all_gather:     In = per-rank input, Out = n x In   -> S = n x In x typesize
    reduce_scatter: In = n x Out, Out = per-rank output -> S = n x Out x typesize
    gather/scatter: S = n x per-rank chunk
    barrier: 0; others: S = In x typesize (all_to_all: what one rank sends)."""
    i, o, n = _int(in_nelems), _int(out_nelems), _int(group_size)
    if op == "barrier":
        return 0, 0
    if not typesize or op is None:
        return None, i
    if op == "all_gather":
        if i is not None and n:
            return n * i * typesize, n * i
        return (o * typesize, o) if o is not None else (None, None)
    if op == "reduce_scatter":
        if o is not None and n:
            return n * o * typesize, n * o
        return (i * typesize, i) if i is not None else (None, None)
    if op == "gather":
        if i is not None and n:
            return n * i * typesize, n * i
        return None, None
    if op == "scatter":
        if o is not None and n:
            return n * o * typesize, n * o
        return None, None
    count = i if i is not None else o
    return (count * typesize, count) if count is not None else (None, None)


def _meta_row(args: dict) -> dict:
    """Normalized metadata from record_param_comms / kernel args (empty values -> None)."""
    api = args.get("Collective name")
    op = canonical_op(str(api)) if api else None
    dtype, ts = _dtype(args.get("dtype"))
    gsize = _int(args.get("Group size"))
    nbytes, numel = message_size(op, args.get("In msg nelems"), args.get("Out msg nelems"), ts, gsize)
    ranks = args.get("Process Group Ranks")
    group = args.get("Process Group Name")
    return {
        "op": op,
        "api": str(api) if api else None,
        "bytes": nbytes,
        "numel": numel,
        "dtype": dtype,
        "group": None if group in (None, "") else str(group),
        "group_size": gsize,
        "group_ranks": None if ranks in (None, "") else str(ranks).replace(" ", ""),
        "seq": _int(args.get("Seq")),
    }


def _shape_meta(op: str | None, args: dict) -> dict:
    """record_shapes fallback (older traces: the nccl:* range's Input Dims/type) for ops whose S
    is simply count x typesize of the input."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if op not in ("all_reduce", "broadcast", "reduce", "send", "recv", "all_to_all") or not dims or not types:
        return {}
    if not isinstance(dims[0], list) or not dims[0]:
        return {}
    numel = 1
    for d in dims[0]:
        numel *= int(d)
    dtype, ts = _dtype(types[0])
    return {"numel": numel, "dtype": dtype, "bytes": numel * ts if ts else None}


# --------------------------------------------------------------------------- extract


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
    cpu_pids: dict[int, int] = {}  # pid -> number of CPU events
    n_events = 0
    try:
        for kind, item in limits.checked_events(iter_trace(path), path):  # types checked once (issue 26)
            if kind == "meta":
                if item[0] in ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion"):
                    meta[item[0]] = item[1]
                continue
            e = item
            if not isinstance(e, dict) or e.get("ph") != "X":
                continue
            n_events += 1
            ts = to_ns(e.get("ts"))
            if ts is None:
                continue
            end = ts + (to_ns(e.get("dur")) or 0)
            cat = e.get("cat") or ""
            name = e.get("name") or ""
            args = e.get("args") or {}
            pid, tid = e.get("pid"), e.get("tid")
            if cat == "kernel":
                if name.startswith("nccl"):
                    kernels.append((ts, end, name, args))
                else:
                    compute.append((_int(args.get("device")), ts, end))
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
                    params.append(_Range(ts, end, pid, tid, name, args))
            elif cat in _RANGE_CATS and name.startswith("nsyscomm"):
                if name.startswith(nvtx_format.COLLECTIVE_PREFIX):
                    wrappers.append(_Range(ts, end, pid, tid, name, args))
                elif name.startswith(nvtx_format.RANK_PREFIX + "|"):
                    rank_marks.append((ts, pid, nvtx_format.parse(name)))
            elif cat in _RANGE_CATS and _is_comm_range(name):
                ranges.append(_Range(ts, end, pid, tid, name, args))
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error, OSError) as ex:
        raise InputError(
            f"{path}: not a readable PyTorch profiler trace ({ex}); "
            f"save one with prof.export_chrome_trace(path) or torch.profiler.tensorboard_trace_handler"
        ) from None
    if not n_events and not meta:
        raise InputError(f"{path}: no trace events; pass a PyTorch profiler (Kineto) JSON trace")

    dist = meta.get("distributedInfo") or {}
    # the rank's process: the CPU pid with most events (a trace is one process; GPU "pids" are device ids)
    main_pid = max(cpu_pids, key=cpu_pids.get) if cpu_pids else 0

    rows = _match(kernels, launches, ranges, params, main_pid, warnings, report, wrappers)
    calls = pd.DataFrame(rows, columns=list(COLUMN_NAMES)).drop(
        columns=["report", "rank", "local_rank", "host", "duration_ns"]
    )
    rank = _int(dist.get("rank"))
    world = _int(dist.get("world_size"))
    local, host = None, None
    marks = sorted((m for m in rank_marks if _int(m[2].get("rank")) is not None), key=lambda m: m[0])
    if marks:  # the wrapper's marker (the first one: later ones repeat it when a --steps window opens)
        _ts, mpid, f = marks[0]
        rank, local = _int(f.get("rank")), _int(f.get("local_rank"))
        world = _int(f.get("world")) if _int(f.get("world")) is not None else world
        host = f.get("host") or None
        if isinstance(mpid, int):
            main_pid = mpid
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
        "bytes": _int(f.get("bytes")),
        "dtype": txt("dtype"),
        "numel": _int(f.get("numel")),
        "group": txt("pg"),
        "group_size": _int(f.get("gsize")),
        "group_ranks": txt("granks"),
        "seq": _int(f.get("seq")),
        "caller": txt("caller"),
        "step": _int(f.get("step")),
        "peer": _int(f.get("peer")),
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
            "stream": _int(kargs.get("stream")),
            "device": _int(kargs.get("device")),
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
            meta = _meta_row(kf["_kargs"])
        if not meta:
            pargs = param_for(r)
            if pargs:
                meta = _meta_row(pargs)
        if not meta:
            meta = _shape_meta(row["op"], r.args)
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
            "stream": _int(kargs.get("stream")),
            "device": _int(kargs.get("device")),
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
            meta = _meta_row(kargs)
            for key, v in meta.items():
                if v is not None and key != "api":
                    row[key] = v
            row["api"] = meta["api"] or row["api"]
        rows.append(row)
    rows.sort(key=lambda r: r.get("gpu_start") if r.get("gpu_start") is not None else r.get("cpu_start") or 0)
    return rows
