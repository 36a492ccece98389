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
- torch.profiler's ``ProfilerStep#N`` ranges (a profile with a schedule, or ``prof.step()``):
  the training step of the calls inside them (nsyscomm.ingest.kineto.profiler_steps), so a
  trace taken at step N > 0 is a capture window, as for nsys reports.
- nsyscomm's own wrapper ranges: under torch.profiler the wrapper records a ``record_function``
  range named with its NVTX message (``nsyscomm:all_reduce|api=...``, nsyscomm/nvtx_format.py)
  around every collective. They become ``source='wrapper'`` rows exactly like the nsys wrapper
  ranges (sql/calls_nsys.sql): fields parsed by ``nvtx_format.parse``, the CPU range as
  cpu_start/end, NCCL kernels launched inside attributed to the innermost one (before any
  PyTorch range). ``nsyscomm.rank|rank=..`` annotations give the rank (before distributedInfo).
  When a trace has wrapper ranges, PyTorch ``nccl:*`` / ``gloo:*`` ranges that own no kernel are
  the same calls seen again (gloo's run on its worker threads) and are not counted; they give
  the asynchronous calls their execution span (nsyscomm.ingest.kineto.worker_spans).

A range owns a kernel when it contains the kernel's launch on the same thread (as for nsys;
nsyscomm.ingest.kineto.calls makes the rows).
Message size S follows nccl-tests (docs/architecture.md, "Message size and bus bandwidth"): all_gather = output = n x per-rank input,
reduce_scatter = input = n x per-rank output, everything else the input.

The file is read as a stream (``traceEvents`` one event at a time), so memory grows with the
number of relevant events, not with the file.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nsyscomm import duck, nvtx_format
from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.busy import busy_before
from nsyscomm.ingest.extract_type import Extract
from nsyscomm.ingest.kineto import checks as kineto_checks
from nsyscomm.ingest.kineto import copies as kineto_copies
from nsyscomm.ingest.kineto import profiler_steps
from nsyscomm.ingest.kineto.calls import Kernel, Launch, Range, match
from nsyscomm.ingest.kineto.meta import int_or_none
from nsyscomm.ingest.kineto.stream import iter_trace, to_ns
from nsyscomm.schema import COLLECTIVES, COLUMN_NAMES

TRACE_SUFFIXES = (".json", ".json.gz")
_BUDGET_EVERY = 1 << 16  # events between two checks of the kept events against the budget
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime"}
_RANGE_CATS = {"user_annotation", "cpu_op", "python_function"}  # CPU-side names we look at
_META_KEYS = ("distributedInfo", "deviceProperties", "baseTimeNanoseconds", "schemaVersion")


def is_trace(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES)


def _is_comm_range(name: str) -> bool:
    return name.startswith(("nccl:", "gloo:", "mpi:", "ucc:", "xccl:"))


@dataclass
class Kept:
    """What one pass over a trace keeps of its events."""

    meta: dict[str, Any] = field(default_factory=dict)
    kernels: list[Kernel] = field(default_factory=list)
    launches: dict[Any, Launch] = field(default_factory=dict)
    ranges: list[Range] = field(default_factory=list)  # PyTorch's nccl:* / gloo:* ranges
    params: list[Range] = field(default_factory=list)  # record_param_comms
    compute: list[tuple[int | None, int, int]] = field(default_factory=list)  # (device, start, end)
    copies: list[kineto_copies.Copy] = field(default_factory=list)  # device-to-device copies
    joins: list[Range] = field(default_factory=list)  # the wrapper's nsyscomm.joined ranges (Join)
    wrappers: list[Range] = field(default_factory=list)  # nsyscomm's record_function ranges
    rank_marks: list[tuple[int, int, dict[str, str]]] = field(default_factory=list)  # (ts, pid, fields)
    steps: list[profiler_steps.StepRange] = field(default_factory=list)  # ProfilerStep#N
    step_marked: set[int] = field(default_factory=set)  # pids with the wrapper's step markers
    span: dict[int, list[int]] = field(default_factory=dict)  # pid -> [first, last] CPU event
    device_span: list[int] = field(default_factory=list)  # the first start and last end of the device's kernels
    cpu_pids: dict[int, int] = field(default_factory=dict)  # pid -> number of CPU events
    n_events: int = 0

    def check_budget(self, path: Path) -> None:
        kept = len(self.kernels) + len(self.ranges) + len(self.params) + len(self.wrappers) + len(self.joins)
        kept += len(self.rank_marks) + len(self.steps)
        kineto_checks.check_budget(path, kept, len(self.compute) + len(self.launches) + len(self.copies))

    def add(self, e: dict) -> None:
        """Keep what the reader uses of one complete ("X") event."""
        ts = to_ns(e.get("ts"))
        if ts is None:
            return
        end = ts + (to_ns(e.get("dur")) or 0)
        cat = e.get("cat") or ""
        name = e.get("name") or ""
        args = e.get("args") or {}
        pid, tid = e.get("pid"), e.get("tid")
        if cat == "kernel":
            ds = self.device_span
            ds[:] = [min(ds[0], ts), max(ds[1], end)] if ds else [ts, end]
            if name.startswith("nccl"):
                self.kernels.append(Kernel(ts, end, name, kineto_checks.slim_args(args)))
            else:
                self.compute.append((int_or_none(args.get("device")), ts, end))
            return
        if cat == "gpu_memcpy" and kineto_copies.is_call_copy(name):
            self.copies.append(kineto_copies.make(ts, end, args))
            return
        if cat in ("gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
            return
        if not isinstance(pid, int) or not isinstance(tid, int):
            return
        s = self.span.setdefault(pid, [ts, end])
        s[0], s[1] = min(s[0], ts), max(s[1], end)
        self.cpu_pids[pid] = self.cpu_pids.get(pid, 0) + 1
        if cat in _LAUNCH_CATS:
            corr = args.get("correlation")
            if corr is not None:
                self.launches[corr] = Launch(ts, end, pid, tid)
        elif name == "record_param_comms":
            if args.get("Collective name"):
                self.params.append(Range(ts, end, pid, tid, name, kineto_checks.slim_args(args)))
        elif cat not in _RANGE_CATS:
            return
        elif name.startswith("nsyscomm"):
            if name.startswith(nvtx_format.COLLECTIVE_PREFIX):
                self.wrappers.append(Range(ts, end, pid, tid, name, {}))  # read from its name
            elif name.startswith(nvtx_format.RANK_PREFIX + "|"):
                self.rank_marks.append((ts, pid, nvtx_format.parse(name)))
            elif name.startswith(nvtx_format.STEP_PREFIX + "|"):
                self.step_marked.add(pid)
            elif name.startswith(nvtx_format.JOINED_PREFIX + "|"):
                self.joins.append(Range(ts, end, pid, tid, name, {}))
        elif _is_comm_range(name):
            self.ranges.append(Range(ts, end, pid, tid, name, kineto_checks.slim_args(args)))
        elif name.startswith(profiler_steps.PREFIX):
            step = profiler_steps.parse(name, pid, ts, end)
            if step is not None:
                self.steps.append(step)


def _mark_joined(rows: list[dict], joins: list[Range]) -> None:
    """A call inside the wrapper's nsyscomm.joined range of its process was made after its rank
    joined under Join (nsyscomm/capture/join_ranks.py): joined = the step it joined at."""
    for j in joins:
        step = int_or_none(nvtx_format.parse(j.name).get("step"))
        for row in rows:
            t = row.get("cpu_start")
            if step is not None and row.get("pid") == j.pid and t is not None and j.start <= t <= j.end:
                row["joined"] = step


def _read(path: Path) -> Kept:
    """One pass over the trace's events, checked against the memory budget as it goes."""
    kept = Kept()
    try:
        for kind, item in limits.checked_events(iter_trace(path), path):  # types checked once, at the edge
            if kind == "meta":
                if isinstance(item, tuple) and item[0] in _META_KEYS:  # iter_trace's ("meta", (key, value))
                    kept.meta[item[0]] = item[1]
                continue
            if not isinstance(item, dict) or item.get("ph") != "X":
                continue
            kept.n_events += 1
            if not kept.n_events % _BUDGET_EVERY:
                kept.check_budget(path)
            kept.add(item)
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, gzip.BadGzipFile, zlib.error, OSError) as ex:
        raise InputError(
            f"{path}: not a readable PyTorch profiler trace ({ex}); "
            f"save one with prof.export_chrome_trace(path) or torch.profiler.tensorboard_trace_handler"
        ) from None
    if not kept.n_events and not kept.meta:
        raise InputError(f"{path}: no trace events; pass a PyTorch profiler (Kineto) JSON trace")
    kept.check_budget(path)
    return kept


@dataclass
class _Identity:
    """Who the trace's process is: its rank and where it ran."""

    pid: int
    rank: int | None
    local: int | None
    world: int | None
    host: str | None


def _identity(path: Path, dist: dict, rank_marks: list[tuple[int, int, dict[str, str]]], main_pid: int) -> _Identity:
    """The rank from the wrapper's marker (the first one: later ones repeat it when a --steps
    window opens), else from distributedInfo; checked against the sizes a job may have."""
    who = _Identity(main_pid, int_or_none(dist.get("rank")), None, int_or_none(dist.get("world_size")), None)
    marks = sorted((m for m in rank_marks if int_or_none(m[2].get("rank")) is not None), key=lambda m: m[0])
    if marks:
        _ts, mpid, f = marks[0]
        who.rank, who.local = int_or_none(f.get("rank")), int_or_none(f.get("local_rank"))
        world = int_or_none(f.get("world"))
        who.world = world if world is not None else who.world
        who.host = f.get("host") or None
        if isinstance(mpid, int):
            who.pid = mpid
    for what, v, lo in (("rank", who.rank, 0), ("local_rank", who.local, 0), ("world size", who.world, 1)):
        if v is not None and not lo <= v <= limits.MAX_GROUP:
            raise InputError(
                f"{path}: the {what} {v} is outside {lo} to {limits.MAX_GROUP}; record the trace again "
                f"(nsyscomm run) or leave this file out"
            )
    return who


def _markers(who: _Identity) -> pd.DataFrame:
    n = int(who.rank is not None)
    return pd.DataFrame(
        {
            "pid": pd.Series([who.pid] * n, dtype="int64"),
            "rank": pd.Series([who.rank] * n, dtype="Int64"),
            "local_rank": pd.Series([who.local] * n, dtype="Int64"),
            "world": pd.Series([who.world] * n, dtype="Int64"),
            "host": pd.Series([who.host] * n, dtype="object"),
        }
    )


def _spans(kept: Kept, pid: int) -> pd.DataFrame:
    """The process's whole time span: its CPU events and its device's kernels (which run past its
    last host event too)."""
    if pid not in kept.span:
        return pd.DataFrame(
            {
                "pid": pd.Series([], dtype="int64"),
                "first_ns": pd.Series([], dtype="int64"),
                "last_ns": pd.Series([], dtype="int64"),
            }
        )
    first, last = kept.span[pid]
    if kept.device_span:
        first, last = min(first, kept.device_span[0]), max(last, kept.device_span[1])
    return pd.DataFrame({"pid": [pid], "first_ns": [first], "last_ns": [last]})


def _frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as the collectives table's columns, the integer ones as nullable 64-bit integers:
    a column with a value on some rows only (exec_start where gloo's own range timed the call)
    would otherwise become float64, which rounds nanoseconds since the epoch and which the bounds
    check of the table's times does not read."""
    integer = {name for name, sql in COLLECTIVES if sql in ("BIGINT", "INTEGER")}
    return pd.DataFrame(
        {
            name: pd.array([r.get(name) for r in rows], dtype="Int64")
            if name in integer
            else [r.get(name) for r in rows]
            for name in COLUMN_NAMES
        },
        columns=list(COLUMN_NAMES),
    )


def extract(path: str | Path, report: str | None = None) -> Extract:
    path = Path(path)
    report = report or path.name
    warnings: list[str] = []
    kept = _read(path)
    dist = kineto_checks.distributed_info(path, kept.meta.get("distributedInfo"))
    # the rank's process: the CPU pid with most events (a trace is one process; GPU "pids" are device ids)
    main_pid = max(kept.cpu_pids, key=lambda p: kept.cpu_pids[p]) if kept.cpu_pids else 0

    rows = match(kept, main_pid, warnings, report)
    profiler_steps.assign(rows, kept.steps, kept.step_marked)
    _mark_joined(rows, kept.joins)
    kineto_checks.check_int64(path, rows)
    calls = _frame(rows).drop(columns=["report", "rank", "local_rank", "host", "duration_ns"])
    who = _identity(path, dist, kept.rank_marks, main_pid)
    if who.rank is None:
        warnings.append(
            f"{report}: no distributedInfo.rank (nor nsyscomm rank marker) in the trace; rank taken from the file order"
        )
    version = dist.get("nccl_version")
    version = version if isinstance(version, (str, int)) and len(str(version)) <= 64 else None
    compute = pd.DataFrame(kept.compute, columns=["device", "start", "end"]).assign(pid=who.pid)
    return Extract(
        report=report,
        path=path,
        calls=busy_before(duck.frame_arrow(calls), compute),
        markers=_markers(who),
        spans=_spans(kept, who.pid),
        session_start_utc_ns=None,
        nsys_version=f"kineto (NCCL {version})" if version else "kineto",
        warnings=warnings,
    )
