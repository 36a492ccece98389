"""The arrows of the Perfetto trace (views/trace.py): flow events ("s" -> "f", ``bp: "e"``) that
bind to the slices enclosing their ends. Across ranks, the calls of one logical collective in
order of arrival and each send to its receive; within a rank, an asynchronous call's launch on
the calling thread to its execution on the communication track."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from nsyscomm.views.trace_tracks import us as _us


@dataclass
class Drawn:
    """A slice as placed in the trace: its call's row, rank (pid), track (tid) and span in ns."""

    call: dict[str, Any]
    rank: int
    tid: int
    start: int
    end: int


@dataclass
class _Arrow:
    at: int  # ns, where the arrow starts: the arrows are numbered in this order
    cat: str
    name: str
    ta: float  # us
    a: Drawn
    tb: float
    b: Drawn


def _emit(arrows: list[_Arrow], events: list[dict], first_id: int) -> int:
    arrows.sort(key=lambda x: (x.at, x.cat, x.name))
    for fid, x in enumerate(arrows, start=first_id):
        events.append({"ph": "s", "cat": x.cat, "name": x.name, "id": fid, "ts": x.ta, "pid": x.a.rank, "tid": x.a.tid})
        events.append(
            {"ph": "f", "bp": "e", "cat": x.cat, "name": x.name, "id": fid, "ts": x.tb, "pid": x.b.rank, "tid": x.b.tid}
        )
    return len(arrows)


def rank_arrows(primary: list[Drawn], origin: int, events: list[dict]) -> int:
    """Flow arrows between the ranks' calls of one logical collective, in order of arrival, and
    from each send to its receive (a message); returns how many. Their ids count from 1."""
    groups: dict[tuple, list[Drawn]] = defaultdict(list)
    messages: dict[int, dict[str, Drawn]] = {}
    for d in primary:
        r = d.call
        if r.get("pair") is not None and r.get("op") in ("send", "recv") and r.get("logical_id") is not None:
            messages.setdefault(r["logical_id"], {})[r["op"]] = d
            continue
        groups[(r.get("group"), r.get("op"), r.get("seq"), r.get("logical_id"))].append(d)
    arrows = _collective_arrows(groups, origin) + _message_arrows(messages, origin)
    return _emit(arrows, events, 1)


def _collective_arrows(groups: dict[tuple, list[Drawn]], origin: int) -> list[_Arrow]:
    arrows = []
    for key in sorted(groups, key=lambda k: (min(d.start for d in groups[k]), str(k))):
        # ties (duplicated ranks) never compare rows
        members = sorted(groups[key], key=lambda d: (d.start, d.rank, d.tid, d.end))
        if len({d.rank for d in members}) < 2:
            continue
        g, op, seq, _ = key
        name = f"{op} seq {seq}" + (f" group {g}" if g is not None else "")
        for a, b in zip(members, members[1:]):
            # both ends inside their slices (so each binds to its enclosing slice), at the same
            # offset from the slices' starts: the arrow never points back in time (a reader
            # sorting by time must meet "s" before "f")
            off = min(a.end - a.start, b.end - b.start) / 2
            ta = _us(a.start + off, origin)
            tb = _us(b.start + off, origin)
            if tb <= ta and ta + 0.001 <= _us(b.end, origin):
                tb = round(ta + 0.001, 3)
            arrows.append(_Arrow(a.start, "logical_collective", name, ta, a, tb, b))
    return arrows


def _message_arrows(messages: dict[int, dict[str, Drawn]], origin: int) -> list[_Arrow]:
    arrows = []
    for lid in sorted(messages, key=lambda k: (min(d.start for d in messages[k].values()), k)):
        m = messages[lid]
        if "send" not in m or "recv" not in m:
            continue
        a, b = m["send"], m["recv"]
        # from the send's start to where the receive holds the data (no earlier than the send):
        # a receive that ended before its send began (timed as its enqueue) gets no arrow
        ta = _us(a.start, origin)
        tb = _us(max(b.start, min(a.start, b.end)), origin)
        if _us(b.end, origin) < ta or b.start == b.end:
            continue
        tb = max(tb, ta)
        group = a.call.get("group")
        name = f"message {a.rank} -> {b.rank}" + (f" group {group}" if group is not None else "")
        arrows.append(_Arrow(a.start, "message", name, ta, a, tb, b))
    return arrows


def launch_arrows(pairs: list[tuple[Drawn, Drawn]], origin: int, events: list[dict], first_id: int) -> int:
    """An arrow from each asynchronous call's launch (its enqueue on the calling thread) to its
    execution: from the launch's middle to the same instant in the execution, or its start when
    the work began after the launch returned (never back in time, each end inside its slice)."""
    arrows = []
    for launch, run in pairs:
        r = launch.call
        ta = _us(launch.start + (launch.end - launch.start) / 2, origin)
        tb = min(max(_us(run.start, origin), ta), _us(run.end, origin))
        ta = min(ta, tb)
        name = f"launch {r.get('op')} seq {r.get('seq')}" + (
            f" group {r['group']}" if r.get("group") is not None else ""
        )
        arrows.append(_Arrow(launch.start, "launch", name, ta, launch, tb, run))
    return _emit(arrows, events, first_id)
