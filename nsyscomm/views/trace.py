"""Chrome Trace Event Format export (opens in Perfetto UI and chrome://tracing).

Layout: one process per rank (pid = rank), its tracks (tids are small per-rank numbers; names
come from metadata events): one per GPU stream, one "communication" track per process for the
execution of asynchronous calls without kernels, one per host thread. Every collective call is
one complete event ("X", cat ``collective``) spanning its execution (exec_start..exec_end): on
its GPU stream; on its communication track for an asynchronous call of gloo or MPI (the
backend's thread ran it); on its host thread for a synchronous one. On the host thread, the host
range of a GPU call (cat ``collective_cpu``), the enqueue of an asynchronous call (cat
``collective_launch``, with a flow arrow to its execution) and the caller's wait for it (cat
``collective_wait``). Calls of one logical collective (same group, op, seq) on several ranks are
linked by flow arrows ("s" -> "f", in order of arrival), a send to its receive too. A counter
per rank ("C") gives the bytes and calls in flight (executing). Timestamps are microseconds
(floats, ns precision) since the earliest event of the trace; ``otherData.time_origin_ns`` is
that origin on the reports' clock.

Only the normalized ``collectives`` table is read: nothing from the reports' environment or
command line can reach the trace.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nsyscomm import __version__
from nsyscomm.analyses.contract import json_value
from nsyscomm.errors import InputError
from nsyscomm.views import trace_links
from nsyscomm.views.safe import visible_line
from nsyscomm.views.trace_links import Drawn
from nsyscomm.views.trace_tracks import Call, Slice, Tracks, ordered
from nsyscomm.views.trace_tracks import us as _us
from nsyscomm.views.units import human_bytes

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result


class _Source(Protocol):
    """What the trace reads of a Result besides its calls."""

    @property
    def reports(self) -> list: ...
    @property
    def warnings(self) -> list: ...


# the SQL the trace reads: every call with its logical collective's figures
# args shown first in the UI's details pane (the rest follow in table order)
_FIRST_ARGS = (
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
    "source",
)
_DERIVED_ARGS = ("participants", "latency_ns", "wait_ns", "arrival_delay_ns")


def calls(result: Result, steps: tuple[int | None, int | None] | None = None) -> list[dict]:
    """The calls to draw (optionally only steps [lo, hi)), as plain dicts."""
    if steps is not None:
        if not result.has_steps:
            raise InputError(
                "--steps: these reports carry no training step (record steps with the nsyscomm "
                "wrapper's step marker), so no call can be selected by step"
            )
        steps = (None if steps[0] is None else int(steps[0]), None if steps[1] is None else int(steps[1]))
    df = result.timeline_calls(steps)
    cols = list(df.columns)
    return [{k: json_value(v) for k, v in zip(cols, row)} for row in df.itertuples(index=False, name=None)]


def event_name(call: dict) -> str:
    op = call.get("op") or call.get("api") or "collective"
    b = call.get("bytes")
    return f"{op} {human_bytes(b)}" if b is not None else str(op)


def _args(call: dict) -> dict:
    args = {k: call.get(k) for k in _FIRST_ARGS}
    for k, v in call.items():
        if k not in args and k not in _DERIVED_ARGS:
            args[k] = v
    for k in _DERIVED_ARGS:
        args[k] = call.get(k)
    g = call.get("group")
    args["logical"] = f"{'?' if g is None else g}/{call.get('op')}/{call.get('seq')}"
    return args


_HOST_ARGS = ("op", "api", "bytes", "seq", "group", "caller", "step")
_SPAN_ARGS = {"launch": ("peer", "cpu_start", "cpu_end"), "wait": ("peer", "wait_start", "wait_end")}


def _slice_event(s: Slice, rank: int, tid: int, origin: int) -> dict[str, Any]:
    r = s.call
    cat, name = "collective", event_name(r)
    if s.role == "call":
        args = _args(r)
    elif s.role == "host":
        cat, name = "collective_cpu", f"{name} (host)"
        args = {k: r.get(k) for k in (*_HOST_ARGS, "cpu_start", "cpu_end")}
    else:  # the enqueue of an asynchronous call, or the caller's wait for it
        cat, name = f"collective_{s.role}", f"{name} ({s.role})"
        args = {k: r.get(k) for k in (*_HOST_ARGS, *_SPAN_ARGS[s.role], "exec_start", "exec_end")}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": _us(s.start, origin),
        "dur": round((s.end - s.start) / 1000.0, 3),
        "pid": rank,
        "tid": tid,
        "args": args,
    }


def _origin(rows: list[Call]) -> int:
    fields = ("gpu_start", "cpu_start", "exec_start", "wait_start")
    times = [t for r in rows for t in (r.get(f) for f in fields) if t is not None]
    return int(min(times)) if times else 0


def build(
    result: Result,
    steps: tuple[int | None, int | None] | None = None,
    *,
    flows: bool = True,
    what_if: str | None = None,
) -> dict:
    """The trace document {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}.
    what_if: a scenario whose replayed timeline is added beside the measured one."""
    rows = calls(result, steps)
    origin = _origin(rows)
    doc = build_from_rows(rows, result, steps, flows=flows, origin=origin)
    if rows:  # each late arrival's cause on the late rank's own track
        from nsyscomm.views import diagnosis_trace

        doc["traceEvents"] += diagnosis_trace.events(result, origin, steps)
    if what_if is not None:
        from nsyscomm.views import whatif_trace

        doc["traceEvents"] += whatif_trace.events(result, what_if, origin, steps)
    _names_on_one_line(doc["traceEvents"])
    return doc


def _names_on_one_line(events: list[dict]) -> None:
    """Every name a trace viewer shows as a label (an event's, a process's or a track's) on one
    line with its control characters escaped: a name from the report never adds a line."""
    for e in events:
        if isinstance(e.get("name"), str):
            e["name"] = visible_line(e["name"])
        args = e.get("args")
        if e.get("ph") == "M" and isinstance(args, dict):
            for k in ("name", "labels"):
                if isinstance(args.get(k), str):
                    args[k] = visible_line(args[k])


def build_from_rows(
    rows: list[Call],
    result: Result | _Source,
    steps: tuple[int | None, int | None] | None = None,
    *,
    flows: bool = True,
    origin: int = 0,
) -> dict:
    """The trace of these calls (rows of calls()), timestamps counted from origin (ns)."""
    events: list[dict] = []
    tracks = Tracks(events)
    hosts: dict[int, tuple[Any, Any, Any]] = {}
    primary: list[Drawn] = []  # each call's own slice, in placing order
    launch: dict[int, Drawn] = {}  # call row -> the enqueue of an asynchronous call
    execution: dict[int, Drawn] = {}  # ... and its execution on the communication track
    for s in ordered(rows):
        rank = s.call["rank"]
        hosts.setdefault(rank, (s.call.get("host"), s.call.get("pid"), s.call.get("report")))
        tid = tracks.place(rank, s.key, s.start, s.end)
        events.append(_slice_event(s, rank, tid, origin))
        drawn = Drawn(s.call, rank, tid, s.start, s.end)
        if s.role == "call":
            primary.append(drawn)
            if s.key[0] == "comm":
                execution[s.index] = drawn
        elif s.role == "launch":
            launch[s.index] = drawn
    events += _process_events(hosts)
    events += _counter_events(primary, origin)
    step_marks = step_events(rows, tracks, origin)
    n_flows = trace_links.rank_arrows(primary, origin, events) if flows else 0
    n_launch = trace_links.launch_arrows(
        [(launch[i], execution[i]) for i in sorted(launch) if i in execution], origin, events, n_flows + 1
    )
    _names_on_one_line(events)
    for e in events:  # every event carries a float ts (metadata too: some readers expect it)
        e["ts"] = float(e["ts"])
        if "dur" in e:
            e["dur"] = float(e["dur"])
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "tool": "nsyscomm",
            "version": __version__,
            "reports": [str(x) for x in result.reports],
            "time_origin_ns": int(origin),
            "calls": len(primary),
            "flows": n_flows,
            "launch_flows": n_launch,
            # the steps drawn, job-wide: the first call's start to the last call's end (µs)
            "steps": step_marks,
            "step_range": _step_range(steps, result),
            "warnings": [str(w) for w in result.warnings],
        },
    }


def _step_range(steps: tuple[int | None, int | None] | None, result: Result | _Source) -> list | None:
    """The range of steps asked for ([lo, hi), either end None), here or when the job was loaded."""
    if steps is None:
        steps = getattr(getattr(result, "selection", None), "steps", None)
    return None if steps is None else [steps[0], steps[1]]


def _call_span(r: Call) -> tuple[int, int] | None:
    starts = [int(t) for t in (r.get(k) for k in ("cpu_start", "exec_start", "gpu_start")) if t is not None]
    ends = [int(t) for t in (r.get(k) for k in ("cpu_end", "exec_end", "gpu_end", "wait_end")) if t is not None]
    return (min(starts), max(ends)) if starts and ends else None


def step_events(rows: list[Call], tracks: Tracks, origin: int) -> list[dict]:
    """A `steps` track on every rank, a slice per step from the rank's first call of it to its
    last (cut where the rank's next step begins, so that the slices never overlap), as BytePS's
    timeline marks step boundaries; returns the job-wide steps for otherData:
    [{step, ts, dur}], in µs from the origin."""
    spans: dict[tuple[int, int], list[int]] = {}
    for r in rows:
        span = _call_span(r)
        if r.get("step") is None or span is None:
            continue
        k = (int(r["rank"]), int(r["step"]))
        if k in spans:
            spans[k] = [min(spans[k][0], span[0]), max(spans[k][1], span[1])]
        else:
            spans[k] = list(span)
    keys = sorted(spans)
    for i, (rank, step) in enumerate(keys):
        start, end = spans[(rank, step)]
        if i + 1 < len(keys) and keys[i + 1][0] == rank:
            end = max(start, min(end, spans[keys[i + 1]][0]))
        tid = tracks.place(rank, ("steps", None, None), start, end)
        tracks.events.append(
            {
                "ph": "X",
                "cat": "step",
                "name": f"step {step}",
                "ts": _us(start, origin),
                "dur": round((end - start) / 1000.0, 3),
                "pid": rank,
                "tid": tid,
                "args": {"step": step, "rank": rank},
            }
        )
    job: dict[int, list[int]] = {}
    for (_, step), (start, end) in spans.items():
        job[step] = [min(job[step][0], start), max(job[step][1], end)] if step in job else [start, end]
    return [
        {"step": st, "ts": float(_us(a, origin)), "dur": round((b - a) / 1000.0, 3)}
        for st, (a, b) in sorted(job.items())
    ]


def _process_events(hosts: dict[int, tuple[Any, Any, Any]]) -> list[dict]:
    """A named process per rank, sorted by rank, labelled with its report."""
    events: list[dict] = []
    for rank in sorted(hosts):
        host, pid, report = hosts[rank]
        where = ", ".join(x for x in (str(host) if host else "", f"pid {pid}" if pid is not None else "") if x)
        label = f"rank {rank}" + (f" ({where})" if where else "")
        events.append({"ph": "M", "name": "process_name", "ts": 0, "pid": rank, "tid": 0, "args": {"name": label}})
        events.append(
            {"ph": "M", "name": "process_sort_index", "ts": 0, "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        )
        if report:
            events.append(
                {"ph": "M", "name": "process_labels", "ts": 0, "pid": rank, "tid": 0, "args": {"labels": str(report)}}
            )
    return events


def _counter_events(primary: list[Drawn], origin: int) -> list[dict]:
    """Per rank, the bytes and the calls in flight (executing) at each change."""
    by_rank: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for d in primary:
        b = d.call.get("bytes") or 0
        by_rank[d.rank].append((d.start, b, 1))
        by_rank[d.rank].append((d.end, -b, -1))
    events: list[dict] = []
    for rank, deltas in sorted(by_rank.items()):
        deltas.sort(key=lambda d: (d[0], d[2]))  # ends before starts at the same instant
        inflight_b = inflight_n = 0
        out: dict[int, tuple[int, int]] = {}
        for t, db, dn in deltas:
            inflight_b += db
            inflight_n += dn
            out[t] = (inflight_b, inflight_n)
        for t in sorted(out):
            b, n = out[t]
            for name, arg, v in (("bytes in flight", "bytes", b), ("calls in flight", "calls", n)):
                events.append(
                    {
                        "ph": "C",
                        "name": name,
                        "cat": "counter",
                        "ts": _us(t, origin),
                        "pid": rank,
                        "tid": 0,
                        "args": {arg: v},
                    }
                )
    return events


def dumps(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write(
    result: Result,
    path: str | os.PathLike | None = None,
    *,
    steps: tuple[int | None, int | None] | None = None,
    per_rank_dir: str | os.PathLike | None = None,
    what_if: str | None = None,
    write_file: Callable[[Path, str], object] = _write_file,
) -> list[Path]:
    """Write the job's trace to ``path`` and/or one trace per rank to ``per_rank_dir/<rank>/comm.json``
    (BytePS's layout; no cross-rank flows there). Returns the files written. what_if: see build().
    ``write_file(path, text)`` writes each file (the CLI's writes each whole or not at all)."""
    written: list[Path] = []
    if path is not None:
        doc = build(result, steps, what_if=what_if)
        p = Path(path)
        write_file(p, dumps(doc))
        written.append(p)
    if per_rank_dir is not None:
        base = Path(per_rank_dir)
        rows = calls(result, steps)
        origin = _origin(rows)  # one origin for all files: the ranks' traces stay aligned
        by_rank: dict[int, list] = defaultdict(list)
        for r in rows:
            by_rank[int(r["rank"])].append(r)
        for rank in sorted(by_rank):
            doc = build_from_rows(by_rank[rank], result, steps, flows=False, origin=origin)
            f = base / str(rank) / "comm.json"
            write_file(f, dumps(doc))
            written.append(f)
    return written
