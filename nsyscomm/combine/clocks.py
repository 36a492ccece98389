"""Clock alignment across reports of several nsys sessions (docs/architecture.md, "Clocks"):
first by each session's start on the wall clock, then by the end times of matched collectives."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import duckdb

from nsyscomm import duck
from nsyscomm.ingest.extract_type import Extract


def session_offsets(extracts: Sequence[Extract]) -> dict[str, int]:
    """First step of clock alignment: place each report on the wall clock by its session start."""
    starts = {e.report: e.session_start_utc_ns for e in extracts}
    known = {r: v for r, v in starts.items() if v is not None}
    if len(extracts) < 2 or len(known) < len(starts) or len(set(known.values())) == 1:
        return {e.report: 0 for e in extracts}
    ref = min(known.values())
    return {r: v - ref for r, v in known.items()}


def shift(con: duckdb.DuckDBPyConnection, offsets: dict[str, int]) -> None:
    """Move every timestamp of a report by its offset (ns)."""
    for report, off in offsets.items():
        if not off:
            continue
        con.execute("UPDATE report_offsets SET off = off + $off WHERE report = $r", {"off": off, "r": report})
        for table in ("host_calls", "host_ranges"):  # names from this fixed list
            con.execute(
                f'UPDATE {table} SET start = start + $off, "end" = "end" + $off WHERE report = $r',
                {"off": off, "r": report},
            )
        con.execute("UPDATE gap_kernels SET gpu_start = gpu_start + $off WHERE report = $r", {"off": off, "r": report})
        con.execute(
            "UPDATE proc_spans SET first_ns = first_ns + $off, last_ns = last_ns + $off WHERE report = $r",
            {"off": off, "r": report},
        )


def refine(
    con: duckdb.DuckDBPyConnection, ref: str, create_collectives: Callable[[duckdb.DuckDBPyConnection], None]
) -> list[str]:
    """Second step: a collective ends at nearly the same moment on all its ranks, so the median
    difference of matched end times between a report and the reference is its clock error."""
    deltas = con.execute(duck.sql("clock_offsets"), {"ref": ref}).fetchall()
    if not deltas:
        return ["reports come from several nsys sessions and share no collective: clocks aligned by session start only"]
    shift(con, {report: int(delta) for report, delta, _, _ in deltas})
    con.execute("DROP TABLE collectives")
    create_collectives(con)
    worst = max(res for _, _, res, _ in deltas)
    return [
        f"clocks of {len(deltas) + 1} reports aligned by session start and collective end times "
        f"(residual error up to {worst / 1e3:.1f} us, median absolute deviation of matched ends)"
    ]
