"""Chrome Trace Event Format export (opens in Perfetto UI and chrome://tracing).

Layout: one process per rank (pid = rank), one thread per GPU stream and one per host thread
(tids are small per-rank numbers; names come from metadata events). Every collective call is
one complete event ("X", cat ``collective``) on its GPU stream, or on its host thread when no
kernel was matched (gloo, MPI); the host range of a GPU call is an extra event (cat
``collective_cpu``) on its host thread. Calls of one logical collective (same group, op, seq)
on several ranks are linked by flow arrows ("s" -> "f", in order of arrival). A counter per
rank ("C") gives the bytes and calls in flight. Timestamps are microseconds (floats, ns
precision) since the earliest event of the trace; ``otherData.time_origin_ns`` is that origin
on the reports' clock.

Only the normalized ``collectives`` table is read: nothing from the reports' environment or
command line can reach the trace.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from nsyscomm import __version__
from nsyscomm.analyses.contract import json_value
from nsyscomm.errors import InputError
from nsyscomm.views.units import human_bytes

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result

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


def _us(ns: int | float, origin: int) -> float:
    return round((ns - origin) / 1000.0, 3)


class _Lanes:
    """Keeps the X events of one track properly nested: a call that partly overlaps the
    previous one on its track (two rows sharing a kernel, clock quirks) goes to an overflow lane."""

    def __init__(self):
        self.lanes: list[list[tuple[int, int]]] = []  # per lane: stack of open (start, end)

    def place(self, start: int, end: int) -> int:
        for i, stack in enumerate(self.lanes):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if not stack or end <= stack[-1][1]:
                stack.append((start, end))
                return i
        self.lanes.append([(start, end)])
        return len(self.lanes) - 1


def _origin(rows: list[dict]) -> int:
    times = [t for r in rows for t in (r.get("gpu_start"), r.get("cpu_start")) if t is not None]
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
    return doc


def build_from_rows(
    rows: list[dict],
    result: Result,
    steps: tuple[int | None, int | None] | None = None,
    *,
    flows: bool = True,
    origin: int = 0,
) -> dict:
    # tracks: per rank, the GPU streams then the host threads, in a stable order
    placed = []  # (call, primary track key, start, end)
    for r in rows:
        if r.get("gpu_start") is not None and r.get("gpu_end") is not None:
            key = ("gpu", r.get("device"), r.get("stream"))
            start, end = r["gpu_start"], r["gpu_end"]
        elif r.get("cpu_start") is not None and r.get("cpu_end") is not None:
            key = ("cpu", r.get("pid"), r.get("tid"))
            start, end = r["cpu_start"], r["cpu_end"]
        else:
            continue  # no time at all: nothing to draw
        placed.append((r, key, start, max(end, start)))
    events: list[dict] = []
    tids: dict[tuple, int] = {}
    lanes: dict[tuple, _Lanes] = defaultdict(_Lanes)
    hosts = {}

    def tid_of(rank: int, key: tuple, lane: int) -> int:
        k = (rank, key, lane)
        if k not in tids:
            tids[k] = len([1 for x in tids if x[0] == rank]) + 1
            kind, a, b = key
            if kind == "gpu":
                label = f"GPU {'?' if a is None else a} stream {'?' if b is None else b}"
                sort = 0
            else:
                label = f"CPU thread {'?' if b is None else b} (pid {'?' if a is None else a})"
                sort = 1000
            if lane:
                label += f" [overlap {lane}]"
            events.append(
                {"ph": "M", "name": "thread_name", "ts": 0, "pid": rank, "tid": tids[k], "args": {"name": label}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "ts": 0,
                    "pid": rank,
                    "tid": tids[k],
                    "args": {"sort_index": sort + tids[k]},
                }
            )
        return tids[k]

    # tracks are created in a deterministic order: sort by (rank, kind, ids)
    def _k(x):
        return tuple((0, "") if v is None else (1, str(v)) if isinstance(v, str) else (1, f"{v:020d}") for v in x)

    # host ranges of GPU calls go on their threads too; one pass over every track's slices in
    # time order keeps the lanes right when CPU-only calls and host ranges share a thread
    items = [(r, key, start, end, True) for r, key, start, end in placed]
    items += [
        (r, ("cpu", r.get("pid"), r.get("tid")), r["cpu_start"], max(r["cpu_end"], r["cpu_start"]), False)
        for r, key, _, _ in placed
        if key[0] == "gpu" and r.get("cpu_start") is not None and r.get("cpu_end") is not None
    ]
    items.sort(key=lambda p: (p[0]["rank"], p[1][0] != "gpu", _k(p[1][1:]), p[2], -p[3], not p[4]))
    primary: list[tuple[dict, int, int, int, int]] = []  # call, pid, tid, start, end
    for r, key, start, end, is_primary in items:
        rank = r["rank"]
        hosts.setdefault(rank, (r.get("host"), r.get("pid"), r.get("report")))
        lane = lanes[(rank, key)].place(start, end)
        tid = tid_of(rank, key, lane)
        ev = {
            "ph": "X",
            "cat": "collective",
            "name": event_name(r),
            "ts": _us(start, origin),
            "dur": round((end - start) / 1000.0, 3),
            "pid": rank,
            "tid": tid,
        }
        if is_primary:
            ev["args"] = _args(r)
            primary.append((r, rank, tid, start, end))
        else:
            ev["cat"] = "collective_cpu"
            ev["name"] += " (host)"
            ev["args"] = {
                k: r.get(k) for k in ("op", "api", "bytes", "seq", "group", "caller", "step", "cpu_start", "cpu_end")
            }
        events.append(ev)

    # process names, and a counter track per rank
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
    by_rank: dict[int, list] = defaultdict(list)
    for r, rank, _tid, start, end in primary:
        b = r.get("bytes") or 0
        by_rank[rank].append((start, b, 1))
        by_rank[rank].append((end, -b, -1))
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
            events.append(
                {
                    "ph": "C",
                    "name": "bytes in flight",
                    "cat": "counter",
                    "ts": _us(t, origin),
                    "pid": rank,
                    "tid": 0,
                    "args": {"bytes": b},
                }
            )
            events.append(
                {
                    "ph": "C",
                    "name": "calls in flight",
                    "cat": "counter",
                    "ts": _us(t, origin),
                    "pid": rank,
                    "tid": 0,
                    "args": {"calls": n},
                }
            )

    n_flows = _flows(primary, origin, events) if flows else 0

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
            "steps": None if steps is None else [steps[0], steps[1]],
            "warnings": [str(w) for w in result.warnings],
        },
    }


def _flows(primary: list, origin: int, events: list) -> int:
    """Flow arrows between the ranks' calls of one logical collective, in order of arrival, and
    from each send to its receive (a message); returns how many."""
    groups: dict[tuple, list] = defaultdict(list)
    messages: dict[int, dict] = {}
    for r, rank, tid, start, end in primary:
        if r.get("pair") is not None and r.get("op") in ("send", "recv") and r.get("logical_id") is not None:
            messages.setdefault(r["logical_id"], {})[r["op"]] = (start, rank, tid, end, r)
            continue
        groups[(r.get("group"), r.get("op"), r.get("seq"), r.get("logical_id"))].append((start, rank, tid, end, r))
    arrows = []
    for key in sorted(groups, key=lambda k: (min(x[0] for x in groups[k]), str(k))):
        members = sorted(groups[key], key=lambda m: m[:4])  # ties (duplicated ranks) never compare rows
        if len({m[1] for m in members}) < 2:
            continue
        g, op, seq, _ = key
        name = f"{op} seq {seq}" + (f" group {g}" if g is not None else "")
        for a, b in zip(members, members[1:]):
            # both ends inside their slices (so each binds to its enclosing slice), at the same
            # offset from the slices' starts: the arrow never points back in time (a reader
            # sorting by time must meet "s" before "f")
            off = min(a[3] - a[0], b[3] - b[0]) / 2
            ta = _us(a[0] + off, origin)
            tb = _us(b[0] + off, origin)
            if tb <= ta and ta + 0.001 <= _us(b[3], origin):
                tb = round(ta + 0.001, 3)
            arrows.append((a[0], "logical_collective", name, ta, a, tb, b))
    for lid in sorted(messages, key=lambda k: (min(x[0] for x in messages[k].values()), k)):
        m = messages[lid]
        if "send" not in m or "recv" not in m:
            continue
        a, b = m["send"], m["recv"]
        # from the send's start to where the receive holds the data (no earlier than the send):
        # a receive that ended before its send began (timed as its enqueue) gets no arrow
        ta = _us(a[0], origin)
        tb = _us(max(b[0], min(a[0], b[3])), origin)
        if _us(b[3], origin) < ta or b[0] == b[3]:
            continue
        tb = max(tb, ta)
        name = f"message {a[1]} -> {b[1]}" + (f" group {a[4].get('group')}" if a[4].get("group") is not None else "")
        arrows.append((a[0], "message", name, ta, a, tb, b))
    arrows.sort(key=lambda x: (x[0], x[1], x[2]))
    for fid, (_, cat, name, ta, a, tb, b) in enumerate(arrows, start=1):
        events.append({"ph": "s", "cat": cat, "name": name, "id": fid, "ts": ta, "pid": a[1], "tid": a[2]})
        events.append({"ph": "f", "bp": "e", "cat": cat, "name": name, "id": fid, "ts": tb, "pid": b[1], "tid": b[2]})
    return len(arrows)


def dumps(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def write(
    result: Result,
    path: str | os.PathLike | None = None,
    *,
    steps: tuple[int | None, int | None] | None = None,
    per_rank_dir: str | os.PathLike | None = None,
    what_if: str | None = None,
) -> list[Path]:
    """Write the job's trace to ``path`` and/or one trace per rank to ``per_rank_dir/<rank>/comm.json``
    (BytePS's layout; no cross-rank flows there). Returns the files written. what_if: see build()."""
    written: list[Path] = []
    if path is not None:
        doc = build(result, steps, what_if=what_if)
        p = Path(path)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dumps(doc))
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
            d = base / str(rank)
            d.mkdir(parents=True, exist_ok=True)
            f = d / "comm.json"
            f.write_text(dumps(doc))
            written.append(f)
    return written
