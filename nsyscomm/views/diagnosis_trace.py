"""Late arrivals in the Perfetto trace: on each late rank, a track "late arrivals"
with one slice per late arrival, from the collective's first arrival to the rank's own, named
by its cause, the detail in its args. Reads only Result.late."""

from __future__ import annotations

import pandas as pd

from nsyscomm.analyses.result import Result

TID = 10_000  # after every GPU stream and CPU thread track of the rank (views/trace.py numbers them from 1)


def events(result: Result, origin: int, steps: tuple[int | None, int | None] | None = None) -> list[dict]:
    late = result.late
    if late.empty:
        return []
    lo, hi = steps or (None, None)
    out: list[dict] = []
    lanes: dict[int, list[int]] = {}  # rank -> end of the last slice in each lane (no partial overlaps on a track)
    for r in late.sort_values(["rank", "first_arrival"]).itertuples(index=False):
        step = None if pd.isna(r.step) else int(r.step)
        if (lo is not None and (step is None or step < lo)) or (hi is not None and (step is None or step >= hi)):
            continue
        rank, start, end = int(r.rank), int(r.first_arrival), int(r.last_arrival)
        ends = lanes.setdefault(rank, [])
        lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
            label = "late arrivals (nsyscomm diagnosis)" + (f" [overlap {lane}]" if lane else "")
            out.append(
                {"ph": "M", "name": "thread_name", "ts": 0.0, "pid": rank, "tid": TID + lane, "args": {"name": label}}
            )
            out.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "ts": 0.0,
                    "pid": rank,
                    "tid": TID + lane,
                    "args": {"sort_index": TID + lane},
                }
            )
        ends[lane] = end
        out.append(
            {
                "ph": "X",
                "cat": "late_arrival",
                "name": f"late: {r.cause}",
                "ts": round((start - origin) / 1000.0, 3),
                "dur": round((end - start) / 1000.0, 3),
                "pid": rank,
                "tid": TID + lane,
                "args": {
                    "op": r.op,
                    "group": None if pd.isna(r.group) else r.group,
                    "seq": int(r.seq),
                    "step": step,
                    "caller": None if pd.isna(r.caller) else r.caller,
                    "delay_ms": float(r.delay_ms),
                    "cause": r.cause,
                    "detail": r.detail,
                    "root_rank": int(r.root_rank),
                },
            }
        )
    return out
