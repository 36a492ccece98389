"""The "ideal" timeline beside the measured one in the Perfetto trace (`nsyscomm trace --what-if
SCENARIO`): one process per rank, named after the scenario, with every replayed operation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsyscomm.errors import InputError

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result

PID_BASE = 1_000_000  # the measured trace's processes are the ranks: these sort after them


def events(
    result: Result, scenario: str, origin: int, steps: tuple[int | None, int | None] | None = None
) -> list[dict]:
    from nsyscomm.analyses import whatif_result

    try:
        tl = whatif_result.timeline(result, scenario)
    except KeyError:
        names = ", ".join(r["scenario"] for r in result.what_if) or "none"
        raise InputError(
            f"--what-if {scenario}: not available for this job (available: {names}; see the summary's notes)"
        ) from None
    if steps is not None:
        lo, hi = steps
        keep = tl["step"].notna()
        if lo is not None:
            keep &= tl["step"] >= lo
        if hi is not None:
            keep &= tl["step"] < hi
        tl = tl[keep]
    out = []
    for rank in sorted(int(r) for r in tl["rank"].unique()):
        out.append(
            {
                "ph": "M",
                "name": "process_name",
                "ts": 0,
                "pid": PID_BASE + rank,
                "tid": 0,
                "args": {"name": f"rank {rank} (what-if: {scenario})"},
            }
        )
        out.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "ts": 0,
                "pid": PID_BASE + rank,
                "tid": 0,
                "args": {"sort_index": PID_BASE + rank},
            }
        )
    for r in tl.itertuples(index=False):
        out.append(
            {
                "ph": "X",
                "cat": "whatif",
                "name": str(r.name),
                "ts": round((r.start_ns - origin) / 1000.0, 3),
                "dur": round(max(r.end_ns - r.start_ns, 0) / 1000.0, 3),
                "pid": PID_BASE + int(r.rank),
                "tid": 0,
                "args": {"scenario": scenario, "step": None if r.step != r.step else int(r.step)},
            }
        )
    return out
