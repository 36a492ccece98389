"""The tracks of the Perfetto trace (views/trace.py): where each call's slices go, and the tids
of a rank's tracks, named, with overflow lanes so that slices of one track always nest."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

Call = dict[str, Any]  # one row of sql/timeline_calls.sql, its values JSON-ready


def us(ns: int | float, origin: int) -> float:
    """A trace timestamp: microseconds since origin (ns), three decimals keeping the ns."""
    return round((ns - origin) / 1000.0, 3)


class Lanes:
    """Keeps the X events of one track properly nested: a call that partly overlaps the
    previous one on its track (two rows sharing a kernel, clock quirks) goes to an overflow lane."""

    def __init__(self) -> None:
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


# a track of a rank: ("gpu", device, stream), ("comm", pid, None) for the execution of the
# asynchronous calls of a process without kernels, ("cpu", pid, tid) for a host thread
TrackKey = tuple[str, Any, Any]
_TRACK_ORDER = {"gpu": 0, "comm": 1, "cpu": 2}
# a call's slices: its execution ("call"); on its host thread its host range when a kernel ran
# it ("host"), the enqueue of an asynchronous call ("launch"), the caller's wait for it ("wait")
_ROLE_ORDER = {"call": 0, "host": 1, "launch": 1, "wait": 2}


@dataclass
class Slice:
    index: int  # the call's row
    call: Call
    role: str
    key: TrackKey
    start: int
    end: int


def _span(call: Call, start: str, end: str) -> tuple[int, int] | None:
    a, b = call.get(start), call.get(end)
    return None if a is None or b is None else (a, max(b, a))


def call_slices(index: int, r: Call) -> list[Slice]:
    """Where a call is drawn. Its execution is the call's slice: the kernels' span on its GPU
    stream; an asynchronous call's execution without kernels on its process's communication
    track (the work ran on the backend's thread, not the caller's); a synchronous one's host
    range on its thread (the calling thread did the work)."""
    gpu, cpu = _span(r, "gpu_start", "gpu_end"), _span(r, "cpu_start", "cpu_end")
    exe, wait = _span(r, "exec_start", "exec_end"), _span(r, "wait_start", "wait_end")
    thread: TrackKey = ("cpu", r.get("pid"), r.get("tid"))
    out = []
    if gpu is not None:
        out.append(Slice(index, r, "call", ("gpu", r.get("device"), r.get("stream")), *gpu))
        if cpu is not None:
            out.append(Slice(index, r, "host", thread, *cpu))
    elif exe is not None and exe != cpu:
        out.append(Slice(index, r, "call", ("comm", r.get("pid"), None), *exe))
        if cpu is not None:
            out.append(Slice(index, r, "launch", thread, *cpu))
    elif cpu is not None:
        out.append(Slice(index, r, "call", thread, *cpu))
    else:
        return []  # no time at all: nothing to draw
    if wait is not None:
        out.append(Slice(index, r, "wait", thread, *wait))
    return out


def _sort_id(v: object) -> tuple[int, str]:
    # tracks are created in a deterministic order: by (rank, kind, ids), None first
    if v is None:
        return (0, "")
    return (1, v) if isinstance(v, str) else (1, f"{v:020d}")


def ordered(rows: list[Call]) -> list[Slice]:
    """Every slice, per rank and track in time order (outer before inner, the call's own slice
    first), so that one pass places the lanes right where several kinds share a thread."""
    slices = [s for i, r in enumerate(rows) for s in call_slices(i, r)]
    slices.sort(
        key=lambda s: (
            s.call["rank"],
            _TRACK_ORDER[s.key[0]],
            tuple(_sort_id(v) for v in s.key[1:]),
            s.start,
            -s.end,
            _ROLE_ORDER[s.role],
        )
    )
    return slices


class Tracks:
    """The tids of one trace: small numbers per rank in order of first use, each named by
    metadata events; a track whose slices partly overlap gets overflow lanes of its own."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events
        self.tids: dict[tuple[int, TrackKey, int], int] = {}
        self.per_rank: dict[int, int] = defaultdict(int)
        self.lanes: dict[tuple[int, TrackKey], Lanes] = defaultdict(Lanes)

    def place(self, rank: int, key: TrackKey, start: int, end: int) -> int:
        lane = self.lanes[(rank, key)].place(start, end)
        k = (rank, key, lane)
        if k not in self.tids:
            self.per_rank[rank] += 1
            self.tids[k] = self.per_rank[rank]
            self._name(rank, key, lane, self.tids[k])
        return self.tids[k]

    def _name(self, rank: int, key: TrackKey, lane: int, tid: int) -> None:
        kind, a, b = key
        if kind == "gpu":
            label, sort = f"GPU {'?' if a is None else a} stream {'?' if b is None else b}", 0
        elif kind == "comm":
            label, sort = f"communication (pid {'?' if a is None else a})", 500
        elif kind == "steps":  # the training steps, above every other track of the rank
            label, sort = "steps", -1000
        else:
            label, sort = f"CPU thread {'?' if b is None else b} (pid {'?' if a is None else a})", 1000
        if lane:
            label += f" [overlap {lane}]"
        self.events.append(
            {"ph": "M", "name": "thread_name", "ts": 0, "pid": rank, "tid": tid, "args": {"name": label}}
        )
        self.events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "ts": 0,
                "pid": rank,
                "tid": tid,
                "args": {"sort_index": sort + tid},
            }
        )
