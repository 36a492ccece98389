"""Why a rank is late: for each logical collective whose last rank arrived more than a
noise threshold after the first, what the late rank did since its previous call, compared with
the other ranks. Causes, in the order they are tried:

- ``previous_comm``: most of the delay was already there when the rank left its previous call
  (its gap since that call is not longer than the others'): it was held up in an earlier
  collective. The chain of such holds is followed to its root, the first late arrival in it
  that had a cause of its own.
- ``gpu_compute``: the gap on the device is longer than the others' but the CPU came to launch
  the collective no later than theirs (its host gap is not longer): the kernels queued ahead of
  it on the device ran longer. The detail gives the compute busy time in the gap against the
  others' median, and the kernels by name that ran longest beyond the same kernels on the other
  ranks (nsyscomm/ingest/nsys/gap_kernels.py). (Comparing busy time alone would blame compute
  whenever a rank arrives late: the later it arrives, the more of the same backward kernels fall
  inside its gap.)
- ``host``: the CPU came late to the call (its host gap is longer by most of the extra): OS-runtime
  calls of the calling thread in that gap (nsys -t osrt: sleep, I/O, futex...) when they cover
  most of it, and the program's own NVTX ranges there (data loading, checkpointing) when one
  covers most of it, even without the OS-runtime trace; else "host time that nothing recorded
  explains" (the report has the OS-runtime trace, nothing in it fills the gap). On CPU-only jobs
  (gloo) every gap is a host gap.
- ``unknown``, with the reason: the report has no OS-runtime trace and no kernel explains the
  gap, or the late call is the rank's first. Never a guess.

"Most" is half: a cause is named when it accounts for at least half of what it must explain.
The noise threshold is NOISE_NS (100 us), fixed rather than taken from the job's own spreads: a
rank that is late at every collective makes the typical spread its own delay, and a threshold
derived from it would hide the straggler it should name.
The model is described in docs/diagnosis.md.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import duckdb
import pandas as pd

from nsyscomm import duck

NOISE_NS = 100_000  # 100 us
CAUSES = ("gpu_compute", "host", "previous_comm", "unknown")


def _missing(x) -> bool:
    """NULL in the query's rows, read as plain Python values (None; NaN, should a median give one)."""
    return x is None or x != x


def _cause(r) -> tuple[str, str]:
    """(cause, detail) of one late arrival, before chains are followed."""
    delay = r.delay
    if _missing(r.gap):
        return "unknown", "the rank's first collective in the report: no earlier call to measure from"
    others = 0 if _missing(r.others_gap) else r.others_gap
    extra = r.gap - others
    if extra < 0.5 * delay:
        return "previous_comm", ""
    ms = extra / 1e6
    host_extra = extra
    if r.on_device and not _missing(r.host_gap):
        host_extra = r.host_gap - (0 if _missing(r.others_host_gap) else r.others_host_gap)
        if host_extra < 0.5 * extra:
            if _missing(r.busy_gap):
                return "unknown", (
                    f"{ms:.3f} ms longer device gap than the other ranks with the launch on time, "
                    f"and no compute kernels in the report to explain it"
                )
            others_busy = 0 if _missing(r.others_busy_gap) else r.others_busy_gap
            if isinstance(r.slower_kernels, str):
                kernels = f"; longer than on the other ranks: {r.slower_kernels}"
            elif r.has_gap_kernels:
                kernels = (
                    "; no kernel by name ran longer than on the other ranks by 5% of the extra busy time "
                    "(the extra is spread over many kernels, or in kernels that overlapped the previous collective)"
                )
            else:
                kernels = "; kernel names not kept for this report (nsys exports whose kernels fit in memory keep them)"
            return "gpu_compute", (
                f"launched on time but the device was busy {r.busy_gap / 1e6:.3f} ms with compute "
                f"kernels since the previous collective, against {others_busy / 1e6:.3f} ms on the "
                f"other ranks (median){kernels}"
            )
        ms = host_extra / 1e6
    # the program's own NVTX ranges in the gap (data loading, checkpointing): its own account of
    # what the host did, named beside (or, without an OS-runtime trace, instead of) the calls
    ranges = not _missing(r.nvtx_ns) and r.nvtx_ns >= 0.5 * host_extra
    if r.has_osrt:
        osrt = 0 if _missing(r.osrt_ns) else r.osrt_ns
        if osrt >= 0.5 * host_extra:
            inside = f"; in NVTX ranges: {r.nvtx_ranges}" if ranges else ""
            return "host", f"OS-runtime calls on the calling thread: {r.osrt_calls}{inside}"
        if ranges:
            return "host", f"NVTX ranges on the calling thread: {r.nvtx_ranges} (no OS-runtime call fills them)"
        return "host", (
            f"{ms:.3f} ms of host time that nothing recorded explains "
            f"(no OS-runtime call, NVTX range or kernel fills it)"
        )
    if ranges:
        return "host", (
            f"NVTX ranges on the calling thread: {r.nvtx_ranges} "
            f"(no OS-runtime trace in the report to say what they waited on)"
        )
    if r.by_wrapper:  # nsyscomm run's light preset (or --nsys-args) left the trace out
        reason = "no OS-runtime trace in the report (nsyscomm run's default preset records it; --preset light does not)"
    else:
        reason = "no OS-runtime trace in the report (profile with nsys -t osrt, or with nsyscomm run's default preset)"
    return "unknown", f"the CPU came {ms:.3f} ms later than the other ranks to launch it; {reason}"


def late_arrivals(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per late arrival: rank, group, seq, op, step, caller, delay_ms, cause, detail,
    root_rank (the rank a previous_comm chain starts from; the rank itself otherwise), and the
    collective's first and last arrival (ns, the job's clock)."""
    cols = [
        "logical_id",
        "rank",
        "group",
        "seq",
        "op",
        "step",
        "caller",
        "delay_ms",
        "cause",
        "detail",
        "root_rank",
        "first_arrival",
        "last_arrival",
    ]
    table = con.execute(duck.sql("late_arrivals"), {"noise_ns": NOISE_NS}).to_arrow_table()
    if not table.num_rows:
        return pd.DataFrame(columns=cols)
    df = duck.arrow_frame(table)
    # the rows as plain Python values, made once, column by column: pandas' rows hold numpy
    # scalars and pd.NA, and a test of each value for NULL through pandas cost more than the rest
    row = collections.namedtuple("row", table.column_names)  # type: ignore[misc]
    rows: list[Any] = [row(*values) for values in zip(*(c.to_pylist() for c in table.columns))]
    causes = [_cause(r) for r in rows]
    cause = [c for c, _ in causes]
    detail = [d for _, d in causes]
    holds = _holds(rows, cause)
    roots, details = [], []
    for i, r in enumerate(rows):
        if cause[i] != "previous_comm":
            roots.append(int(r.rank))
            details.append(detail[i])
            continue
        held_in, cur = holds[i]
        c = rows[cur]
        if held_in is not None and cause[cur] != "previous_comm":
            first = rows[held_in]
            roots.append(int(c.rank))
            details.append(
                f"held up in {first.op} seq {first.seq} of group {first.group}; root: "
                f"rank {int(c.rank)} late to {c.op} seq {c.seq} ({cause[cur]}: {detail[cur]})"
            )
        elif held_in is not None:
            first = rows[held_in]
            roots.append(int(c.rank))
            details.append(f"held up in {first.op} seq {first.seq} of group {first.group}")
        else:
            roots.append(int(r.rank))
            details.append(
                "left its previous collective late, and that collective had no late arrival "
                "above the threshold: a chain below the noise threshold, or the previous call "
                "itself ran long"
            )
    df["cause"] = cause
    df["root_rank"] = roots
    df["detail"] = details
    df["delay_ms"] = df["delay"] / 1e6
    return df[cols]


def _holds(rows: list, cause: list[str]) -> list[tuple[int | None, int]]:
    """Per late arrival, the chain of holds followed back from it: (the late arrival it was held
    up in, or None; the one the chain ends at). A previous_comm arrival was held up in the
    previous collective of its rank, when that one was itself a late arrival; the chain follows
    such links until an arrival with a cause of its own, or one whose previous collective was
    not late.

    Where a chain ends is kept for every arrival on it, so that each link is followed once:
    followed again from every arrival, a job whose holds chain on for dozens of collectives
    spent most of the diagnosis here (docs/performance.md). A walk that meets an arrival
    already on it (a cycle, which time order rules out but damaged data might not) stops
    where the walk from that start would, as _walk_holds does."""
    at = {int(r.logical_id): i for i, r in enumerate(rows)}

    def step(i: int) -> int | None:
        prev = rows[i].prev_logical
        if cause[i] != "previous_comm" or _missing(prev):
            return None
        return at.get(int(prev))

    cyclic = -1
    ends: dict[int, int] = {}
    for start in range(len(rows)):
        path: list[int] = []
        on_path: set[int] = set()
        cur = start
        while cur not in ends:
            nxt = step(cur)
            if nxt is None:
                ends[cur] = cur
                break
            if nxt == cur or nxt in on_path:
                ends[cur] = cyclic
                break
            path.append(cur)
            on_path.add(cur)
            cur = nxt
        for i in path:
            ends[i] = ends[cur]
    return [(step(i), ends[i]) if ends[i] != cyclic else _walk_holds(step, i) for i in range(len(rows))]


def _walk_holds(step: Callable[[int], int | None], i: int) -> tuple[int | None, int]:
    """_holds() for one arrival, by walking its chain link by link (step: an arrival's link):
    stops before an arrival the walk has already met (the one it starts from is not counted)."""
    seen: set[int] = set()
    cur, first = i, None
    while (nxt := step(cur)) is not None and nxt not in seen:
        seen.add(nxt)
        first = nxt if first is None else first
        cur = nxt
    return first, cur


def by_rank_and_cause(late: pd.DataFrame) -> pd.DataFrame:
    """Late arrivals per (rank, cause, caller): count and total delay (ms), largest first."""
    if late.empty:
        return pd.DataFrame(columns=["rank", "cause", "caller", "count", "delay_ms"])
    g = (
        late.assign(caller=late["caller"].fillna("?"))
        .groupby(["rank", "cause", "caller"], as_index=False)
        .agg(count=("delay_ms", "size"), delay_ms=("delay_ms", "sum"))
    )
    return g.sort_values(["delay_ms", "rank"], ascending=[False, True], ignore_index=True)


def straggler_order(late: pd.DataFrame, caused: pd.DataFrame) -> pd.DataFrame:
    """The ranks with late arrivals, the one that cost the others the most first: rank,
    late_count, delay_ms (its late arrivals' delays summed), caused_wait_ms (the waiting of the
    other participants those arrivals caused: sql/caused_wait.sql). A rank last by a hair at
    many collectives costs little; one late by 50 ms at a few costs much. Ties: the larger
    delay, then more late arrivals, then the smaller rank. The Diagnosis names the ranks in this
    order, and the first is the straggler of every view (Result.skew)."""
    cols = ["rank", "late_count", "delay_ms", "caused_wait_ms"]
    if late.empty:
        return pd.DataFrame(columns=cols)
    cost = caused.set_index("logical_id")["caused_ns"] if len(caused) else pd.Series(dtype="float64")
    rows = late.assign(caused_wait_ms=late["logical_id"].map(cost).fillna(0).astype("float64") / 1e6)
    per = rows.groupby("rank", as_index=False).agg(
        late_count=("delay_ms", "size"), delay_ms=("delay_ms", "sum"), caused_wait_ms=("caused_wait_ms", "sum")
    )
    per["rank"] = per["rank"].astype("int64")
    order = per.sort_values(
        ["caused_wait_ms", "delay_ms", "late_count", "rank"], ascending=[False, False, False, True], ignore_index=True
    )
    return order[cols]
