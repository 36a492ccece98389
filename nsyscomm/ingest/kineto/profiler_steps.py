"""The training step of each call in a PyTorch profiler (Kineto) trace, from the
``ProfilerStep#N`` ranges that ``torch.profiler.profile.step()`` records.

The contract is the nsys reports' (sql/calls_nsys.sql). Two sources may number a call's step:
the wrapper's label and the ``ProfilerStep#N`` range holding the call's CPU start (ends included,
the largest N where ranges overlap). The wrapper's label is a step only where the wrapper saw
step boundaries in that process: its step markers (an optimizer step, a pipeline schedule's
step, ``nsyscomm.step(i)``) are in the trace, or it labelled a call past step 0. There it wins;
elsewhere it labels every call step 0 ("before the first optimizer step"), which says nothing
about the program's iterations, so the ``ProfilerStep#N`` range's N wins and the label stays
only for calls outside every range. A call without a CPU start (a kernel without its launch)
gets no range's step. One difference, because of what a Kineto trace is: the range and the call
need only share the process, not the thread. A trace is one process and its profiler records
``ProfilerStep#N`` on the thread that calls ``step()``, while backends without kernels record
their own ranges (``gloo:all_reduce``) on their worker threads: those calls are the step's too.
A number no 64-bit integer holds gives no step, as the SQL's cast does.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Collection
from typing import NamedTuple

from nsyscomm.ingest.kineto.meta import int_or_none

PREFIX = "ProfilerStep#"
_NUMBER = re.compile(r"ProfilerStep#([0-9]+)")


class StepRange(NamedTuple):
    pid: int
    start: int
    end: int
    step: int


def parse(name: str, pid: int, start: int, end: int) -> StepRange | None:
    """A ``ProfilerStep#N`` range as a StepRange; None when N is no 64-bit integer."""
    m = _NUMBER.match(name)
    step = int_or_none(m.group(1)) if m else None
    return None if step is None else StepRange(pid, start, end, step)


class _Index:
    """Per process, the step ranges by start, with the latest end reached so far: the walk back
    from a time stops at the first range before which nothing reaches that time."""

    def __init__(self, ranges: list[StepRange]) -> None:
        self._by_pid: dict[int, tuple[list[int], list[StepRange], list[int]]] = {}
        grouped: dict[int, list[StepRange]] = {}
        for r in ranges:
            grouped.setdefault(r.pid, []).append(r)
        for pid, rs in grouped.items():
            rs.sort(key=lambda r: (r.start, r.end))
            reach, last = [], rs[0].end
            for r in rs:
                last = max(last, r.end)
                reach.append(last)
            self._by_pid[pid] = ([r.start for r in rs], rs, reach)

    def step_at(self, pid: int, t: int) -> int | None:
        entry = self._by_pid.get(pid)
        if entry is None:
            return None
        starts, rs, reach = entry
        best = None
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0 and reach[i] >= t:
            if rs[i].end >= t and (best is None or rs[i].step > best):
                best = rs[i].step
            i -= 1
        return best


def wrapper_saw_steps(rows: list[dict], marked_pids: Collection[int]) -> set[int]:
    """The processes where the wrapper saw step boundaries: its step markers (marked_pids) or a
    call it labelled past step 0."""
    saw = set(marked_pids)
    for row in rows:
        step, pid = row.get("step"), row.get("pid")
        if row.get("source") == "wrapper" and isinstance(step, int) and step > 0 and isinstance(pid, int):
            saw.add(pid)
    return saw


def assign(rows: list[dict], ranges: list[StepRange], marked_pids: Collection[int] = ()) -> None:
    """Each row's step: the wrapper's where it saw step boundaries in the row's process, else
    the ``ProfilerStep#N`` range's its CPU start lies in, else what the row had."""
    if not ranges:
        return
    index = _Index(ranges)
    saw = wrapper_saw_steps(rows, marked_pids)
    for row in rows:
        pid, t = row.get("pid"), row.get("cpu_start")
        if pid in saw and row.get("step") is not None:
            continue
        if isinstance(pid, int) and isinstance(t, int):
            n = index.step_at(pid, t)
            if n is not None:
                row["step"] = n
