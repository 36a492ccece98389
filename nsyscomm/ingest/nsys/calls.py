"""One nsys report's calls (sql/calls_nsys.sql) into Arrow, a part of the report at a time.

The query joins each call's range, kernels, completion, capture window and steps; DuckDB's
working memory for that (hash tables and materialized rows of every call) is several times the
calls' Arrow table. Every join in it is keyed by a range, a kernel, a call or a process, so the
report is cut into parts by range number and kernel number, each part's calls made on their own
and their Arrow tables, held narrow meanwhile (nsyscomm.ingest.narrow), put end to end: the
working memory is one part's, whatever the report's size. Only the step depends on every call of
a process (whether the wrapper saw step boundaries there): it is chosen once all parts are made
(sql/call_steps_nsys.sql).
"""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa

from nsyscomm import duck
from nsyscomm.ingest.narrow import narrow, widen

# Calls per part, at most (ranges and kernels of each part, each): DuckDB's working memory for a
# part is about 1 KB a call; each part is planned anew (the query is long) and scans the report's
# ranges and kernels for its own, which is what stops it from being smaller.
PART_CALLS = 1 << 17
# the lookups sql/call_lookups_nsys.sql makes, dropped once the calls are made
_LOOKUPS = (
    "call_profiler_steps",
    "call_step_marks",
    "call_windows",
    "call_join_ranges",
    "call_completions",
    "kernel_owners",
)
# the ranges that can be calls and the launch owners' lookups (nsyscomm.ingest.nsys.extract):
# nothing after the calls reads them
_RANGE_TABLES = ("ranges", "held", "unheld", "range_threads")
_NONE = 1 << 62  # a bound no range or kernel number reaches


def calls(con: duckdb.DuckDBPyConnection, part_calls: int | None = None) -> pa.Table:
    """The report's calls (sql/calls_nsys.sql's columns but p_step, step chosen), part_calls
    (default PART_CALLS) at most per part; con holds src_ranges, ranges, nccl_kernels,
    nccl_kernel_names and innermost (nsyscomm.ingest.nsys.extract); innermost, ranges and the
    launch owners' lookups (held, unheld, range_threads) dropped once read."""
    con.execute(duck.sql("call_lookups_nsys"))
    try:
        # the kernels' owners are in kernel_owners now; nothing else reads innermost
        con.execute("DROP TABLE IF EXISTS innermost")
        query = duck.sql("calls_nsys")
        bounds = _parts(con, part_calls or PART_CALLS)
        parts = []
        wide = None  # the parts' schema, as the query gives it
        for i, b in enumerate(bounds):
            # what DuckDB's allocator kept of the work before (the lookups' and the last part's
            # working memory, several times a part's calls) goes back to the system first: else
            # every part's calls would be added on top of it, and the peak grow with the parts
            duck.release_duckdb_memory(con)
            part = con.execute(query, b).to_arrow_table()
            wide = part.schema
            # held narrow while the next parts are made (a third of the bytes), made wide again
            # once every part is made and the lookups are dropped; the last part (the only one
            # of a small report) has no part made after it: it stays as the query gave it, and
            # is not narrowed beside its query's working memory only to be made wide again
            parts.append(part if i == len(bounds) - 1 else narrow(part))
            del part
        # the step reads call_step_marks alone: the other lookups (kernel_owners the largest), the
        # ranges the parts were cut from and the last part's working memory go back to the system
        # before it, else its work would be added on top of them at the end of the calls, when
        # every part's calls are held; and it reads the parts as they wait, before the calls are
        # made wide again, which the steps after the calls (until the report's rows are dropped)
        # hold
        for t in (*_LOOKUPS, *_RANGE_TABLES):
            if t != "call_step_marks":
                con.execute(f"DROP TABLE IF EXISTS {t}")  # names from the fixed lists above
        duck.release_duckdb_memory(con)
        assert wide is not None  # _parts gives one part at least
        step = _steps(con, parts, wide)
        rows = widen(parts, wide)  # the last part's columns as they are (no copy)
        del parts
        rows = rows.set_column(rows.column_names.index("step"), "step", step)
        return rows.remove_column(rows.column_names.index("p_step"))
    finally:
        for t in _LOOKUPS:
            con.execute(f"DROP TABLE IF EXISTS {t}")  # names from the fixed list above
        # DuckDB reads each part's ranges through pyarrow's scanner, which copies the rows it
        # keeps into pyarrow's memory pool; the pool would keep that memory once freed
        duck.release_arrow_memory()


def _parts(con: duckdb.DuckDBPyConnection, part_calls: int) -> list[dict[str, int]]:
    """The parts' bounds (rid_lo, rid_hi, kid_lo, kid_hi): as many parts as it takes to hold the
    ranges that can be calls, and the kernels, part_calls of each at most in each part if they
    are spread evenly; the first part's bounds start below every number, the last one's end above."""
    ((r_lo, r_hi, ranges),) = con.execute("SELECT min(rid), max(rid), count(*) FROM ranges").fetchall()
    ((k_lo, k_hi, kernels),) = con.execute("SELECT min(kid), max(kid), count(*) FROM kernel_owners").fetchall()
    n = max(1, math.ceil(max(ranges, kernels) / part_calls))
    r_lo, r_step = (r_lo, math.ceil((r_hi - r_lo + 1) / n)) if ranges else (0, 0)
    k_lo, k_step = (k_lo, math.ceil((k_hi - k_lo + 1) / n)) if kernels else (0, 0)
    parts = []
    for i in range(n):
        parts.append(
            {
                "rid_lo": -_NONE if i == 0 else r_lo + i * r_step,
                "rid_hi": _NONE if i == n - 1 else r_lo + (i + 1) * r_step - 1,
                "kid_lo": -_NONE if i == 0 else k_lo + i * k_step,
                "kid_hi": _NONE if i == n - 1 else k_lo + (i + 1) * k_step - 1,
            }
        )
    return parts


def _steps(con: duckdb.DuckDBPyConnection, parts: list[pa.Table], wide: pa.Schema) -> pa.ChunkedArray:
    """Each call's step (sql/call_steps_nsys.sql), in the order of the parts' rows (narrowed or
    not: nsyscomm.ingest.narrow), from the columns it reads, typed as the query gave them."""
    cols = ["pid", "step", "p_step"]
    # those columns alone, wide: DuckDB reads a registered table through pyarrow's scanner, which
    # copies the columns it reads
    rows = widen([p.select(cols) for p in parts], pa.schema([wide.field(c) for c in cols]))
    con.register("call_rows", rows)
    try:
        saw = duck.scalar(con, duck.sql("steps_seen_nsys"))
        return con.execute(duck.sql("call_steps_nsys"), {"saw": saw}).to_arrow_table().column(0)
    finally:
        con.unregister("call_rows")
