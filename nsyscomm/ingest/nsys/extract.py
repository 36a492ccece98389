"""nsys SQLite export -> rows of the normalized `collectives` table (one report).

The report's tables are read into DuckDB by nsyscomm.ingest.nsys.reader; this module turns
them into calls, process markers and spans (sql/nccl_kernels.sql, sql/calls_nsys.sql, ...).
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from nsyscomm import duck
from nsyscomm.errors import InputError
from nsyscomm.ingest import compute_columns, limits
from nsyscomm.ingest.busy import (
    IslandsByProcess,
    busy_at_edges,
    busy_at_edges_in_duckdb,
    islands_by_process,
    islands_in_duckdb,
)
from nsyscomm.ingest.extract_type import Extract
from nsyscomm.ingest.names import nccl_kernel_names
from nsyscomm.ingest.nsys import calls as nsys_calls
from nsyscomm.ingest.nsys import gap_kernels, gpu_metrics, inside_calls, nccl_payload
from nsyscomm.ingest.nsys.reader import Opened, fits_in_memory, open_report, read_only_uri, table_columns

# (pid, device) -> the compute kernels' busy islands: starts, ends, busy time before each; made
# a process at a time as they are read (busy.islands_by_process)
Islands = dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | IslandsByProcess
# the compute kernels' columns (pid, device, start, end, name) as numpy arrays
ComputeKernels = dict[str, np.ndarray]
# both, or (None, None) when the islands were made in DuckDB (kernels that do not fit in memory)
IslandsAndKernels = tuple["Islands | None", "ComputeKernels | None"]

# Input `innermost` of sql/call_lookups_nsys.sql (see there): per NCCL kernel, the innermost range
# of a kind containing its launch on the same thread; a wrapper range first, and a PyTorch range
# only for the kernels no wrapper range holds (the calls would not use it: with the wrapper on,
# the second lookup has nothing to do, and the lookups cost half). Per kind, first an ASOF join:
# the range of that kind that started last at or before the launch on its thread; when it still
# runs at the launch it is the innermost one holding it (any other holder started earlier).
# Otherwise (it ended before the launch: a sibling, the launch may sit in an outer range) the
# launch is looked up again by _LAUNCH_HOLDERS.
_INNERMOST = "CREATE TEMP TABLE innermost (kid BIGINT, kind VARCHAR, rid BIGINT, holds BOOLEAN)"
_LAUNCH_OWNERS = """INSERT INTO innermost
SELECT l.kid, $kind, r.rid, r."end" >= l.ts AS holds
FROM (SELECT k.kid, k.launch_tid AS tid, k.launch_start AS ts
      FROM nccl_kernels k
      WHERE k.launch_start IS NOT NULL AND k.kid NOT IN (SELECT kid FROM innermost)) l
ASOF JOIN (SELECT rid, globalTid, start, "end" FROM ranges WHERE kind = $kind) r
  ON r.globalTid = l.tid AND l.ts >= r.start"""
# The general lookup, for the launches the ASOF join left (kernels of table `unheld`): every
# range holding the launch, the latest-starting wins. The same-thread containment runs as a pure
# range join (IEJoin) on one number line: thread index * stride + (t - t0), with stride > the
# ranges' time span, so threads never interleave (an equality on the thread plans as a slow hash
# join, docs/architecture.md, "DuckDB"). Launches outside [t0, t1] get no key: no range holds them.
_LAUNCH_HOLDERS = """CREATE OR REPLACE TEMP TABLE held AS
SELECT e.kid, e.kind, arg_max(e.rid, e.start) AS rid
FROM (SELECT l.kid, r.rid, r.kind, r.start
      FROM (SELECT k.kid, t.base + k.launch_start AS kl
            FROM nccl_kernels k JOIN range_threads t ON t.globalTid = k.launch_tid
            WHERE k.launch_start BETWEEN t.t0 AND t.t1 AND k.kid IN (SELECT kid FROM unheld)) l
      JOIN (SELECT r.rid, r.kind, r.start, t.base + r.start AS ks, t.base + r."end" AS ke
            FROM ranges r JOIN range_threads t ON t.globalTid = r.globalTid) r
        ON l.kl >= r.ks AND l.kl <= r.ke) e
GROUP BY e.kid, e.kind"""
# The ranges that can own NCCL kernels, numbered once for the lookups above and sql/calls_nsys.sql
# (rid: the range's number in src_ranges). The name only of PyTorch's ranges: calls_nsys.sql
# reads the wrapper's messages (and the fields the C scan split from them,
# nsyscomm.ingest.nsys.scan_arrow.MESSAGE_FIELDS) in src_ranges.
_RANGES = """CREATE TEMP TABLE ranges AS
SELECT rid, start, "end", globalTid, CASE WHEN NOT wrapper THEN name END AS name,
       CASE WHEN wrapper THEN 'wrapper' ELSE 'torch_range' END AS kind
FROM (SELECT *, parsed OR name LIKE 'nsyscomm:%' AS wrapper FROM src_ranges)
WHERE wrapper OR name LIKE 'nccl:%' OR name LIKE 'gloo:%'"""
_RANGE_THREADS = """CREATE OR REPLACE TEMP TABLE range_threads AS
SELECT d.globalTid, (row_number() OVER (ORDER BY d.globalTid) - 1) * b.stride - b.t0 AS base, b.t0, b.t1
FROM (SELECT DISTINCT globalTid FROM src_ranges WHERE globalTid IS NOT NULL) d,
     (SELECT min(start) AS t0, max("end") AS t1, max("end") - min(start) + 1 AS stride FROM src_ranges) b"""


HOST_CALL_MIN_NS = limits.HOST_MIN_NS
# what sql/host_ranges_nsys.sql gives when it finds nothing
_NO_HOST_RANGES = pd.DataFrame(
    {
        "pid": pd.Series(dtype="int64"),
        "tid": pd.Series(dtype="int64"),
        "start": pd.Series(dtype="int64"),
        "end": pd.Series(dtype="int64"),
        "name": pd.Series(dtype=object),
    }
)


def extract(path: str | Path, report: str | None = None, threads: int | None = None) -> Extract:
    path = Path(path)
    report = report or path.name
    try:
        return _extract(path, report, threads)
    except duckdb.Error as e:
        if "unicode" not in str(e).lower():
            raise
    # DuckDB rejects text that is not UTF-8 (a profiled program's NVTX strings can be anything):
    # read a private copy whose strings had their bad bytes replaced; the input stays untouched
    with tempfile.TemporaryDirectory(prefix="nsyscomm-") as tmp:
        copy, fixed = _utf8_copy(path, Path(tmp) / "report.sqlite")
        ex = _extract(copy, report, threads)
    ex.path = path
    ex.warnings.append(f"{report}: {fixed} string(s) were not valid UTF-8; read with the bad bytes replaced")
    return ex


_TEXT_COLUMNS = {"StringIds": ("value",), "NVTX_EVENTS": ("text", "jsonText")}


def _utf8_copy(path: Path, dst: Path) -> tuple[Path, int]:
    fixed = 0

    def fix(b):
        nonlocal fixed
        text = bytes(b).decode("utf-8", "replace")
        if "\ufffd" in text:
            fixed += 1
        return text

    src = sqlite3.connect(read_only_uri(path), uri=True)
    out = sqlite3.connect(dst)
    try:
        src.backup(out)
        out.create_function("nsyscomm_utf8", 1, fix, deterministic=True)
        tables = table_columns(dst)
        for table, cols in _TEXT_COLUMNS.items():  # names from the fixed list above
            for c in cols:
                if c in tables.get(table, ()):
                    out.execute(
                        f'UPDATE "{table}" SET "{c}" = nsyscomm_utf8(CAST("{c}" AS BLOB)) '
                        f"WHERE typeof(\"{c}\") = 'text'"
                    )
        out.commit()
    finally:
        src.close()
        out.close()
    return dst, fixed


def _extract(path: Path, report: str, threads: int | None) -> Extract:
    from nsyscomm.ingest.nsys import arrow as nsys_arrow  # an Arrow export, read without SQLite

    arrow = nsys_arrow.is_export(path)
    opened = nsys_arrow.open_export(path, threads) if arrow else open_report(path, threads)
    con, tables, warnings = opened.con, opened.tables, opened.warnings
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsyscomm-extract")
    kernels_read = threading.Event()  # set once nothing but the busy islands reads src_kernels
    try:
        spans = _process_spans(con)
        _nccl_kernel_names(con, opened)
        # the compute kernels for the busy islands, read on a second core meanwhile where DuckDB
        # holds them
        compute = _start_islands(pool, con, opened, kernels_read)
        _nccl_kernels(con, kernels_read, warnings, report)
        if opened.compute is not None:
            # the C scan's src_kernels holds the NCCL kernels alone, all in nccl_kernels now (the
            # islands are made of its arrays, not of this table)
            con.execute("DROP TABLE src_kernels")
        _own_launches(con)
        beside = _start_report_reads(pool, con, tables, opened, attached=not arrow)
        calls = nsys_calls.calls(con)
        unlaunched = duck.scalar(con, "SELECT count(*) FROM nccl_kernels WHERE launch_start IS NULL")
        if unlaunched:
            warnings.append(
                f"{report}: {unlaunched} NCCL kernel(s) have no launch call in the report "
                f"(capture window edge); counted from the kernel name alone"
            )
        markers = con.execute(_MARKERS).df()
        groups = con.execute(_GROUPS).df()
        # NCCL's own NVTX payloads: sizes, communicators and ranks for calls without the wrapper
        calls, markers = nccl_payload.apply(con, tables, calls, markers, warnings, report, path)
        # NCCL's communicator init inside the calls; copies as the device time of calls without a kernel
        calls, _copied = inside_calls.apply(con, tables, calls, warnings, report)
        windowed = bool(duck.scalar(con, "SELECT count(*) FROM src_ranges WHERE name = 'nsyscomm.capture'"))
        # beside the calls, or here once the report's rows are let go of (_drop_rows)
        read = beside.result() if beside is not None else None
        _drop_rows(con, compute)
        calls, gap_rows = _busy_at_edges(pool, con, calls, compute)
        links = gpu_metrics.link_usage(con, tables, calls, warnings, report)
        session, version, host_calls, host_ranges, names = read or _report_reads(con, tables, opened, None)
        gaps = gap_names = None
        if gap_rows is not None:
            gaps = gap_rows.result()
            gap_names = gap_kernels.names_of(gaps, con, names)
    finally:
        kernels_read.set()
        pool.shutdown(wait=True)  # its cursor reads con
        duck.close_soon(con)
    return Extract(
        report,
        path,
        calls,
        markers,
        spans,
        session,
        version,
        warnings,
        links,
        host_calls,
        groups,
        host_ranges,
        gaps,
        gap_names,
        windowed=windowed,
    )


_MARKERS = r"""
    SELECT DISTINCT ((globalTid >> 24) & 16777215) AS pid,
           TRY_CAST(regexp_extract(name, '\|rank=([0-9]+)', 1) AS INTEGER)       AS rank,
           TRY_CAST(regexp_extract(name, '\|local_rank=([0-9]+)', 1) AS INTEGER) AS local_rank,
           TRY_CAST(regexp_extract(name, '\|world=([0-9]+)', 1) AS INTEGER)      AS world,
           nullif(regexp_extract(name, '\|host=([^|]*)', 1), '')                  AS host
    FROM src_ranges WHERE name LIKE 'nsyscomm.rank|%' AND globalTid IS NOT NULL
"""
_GROUPS = r"""
    SELECT DISTINCT regexp_extract(name, '\|pg=([^|]*)', 1) AS "group",
           regexp_extract(name, '\|desc=([^|]*)', 1)        AS "desc"
    FROM src_ranges WHERE name LIKE 'nsyscomm.group|%'
"""


def _process_spans(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every event of every process counts for its span: taken first, then the copy of
    NVTX_EVENTS is dropped (only its named ranges are used below) and its memory serves the next
    steps, which lowers the peak memory of a large report."""
    spans = duck.frame(con.execute(duck.sql("process_spans")))
    con.execute("DROP VIEW src_events")
    con.execute("DROP TABLE IF EXISTS src_nvtx")
    return spans


# The report's rows the calls are made of (kernels, launches, ranges and the lookups between
# them), in the tables and views nsyscomm.ingest.nsys.reader and the steps above make: none is
# read once the calls are complete. compute_islands (the busy islands made in DuckDB) stays.
_ROW_VIEWS = ("src_ranges", "src_ranges_all")  # src_ranges_all: the C scan's ranges in Arrow, else a view
_ROW_TABLES = (
    "src_kernels",
    "nccl_kernels",
    "nccl_kernel_names",
    "ranges",
    "unheld",
    "held",
    "range_threads",
    "range_rows",  # the ranges DuckDB copied (under the view src_ranges_all)
    "rel_strings",
)


def _drop_rows(con: duckdb.DuckDBPyConnection, compute: Future[IslandsAndKernels]) -> None:
    """Drop the report's rows once the calls are complete, and hand their memory back to the
    system before the steps after (the kernels in each call's gap, the OS-runtime calls), which
    would otherwise add their peak to it. Waits for the busy islands: made in DuckDB, they read
    src_kernels."""
    compute.result()
    for v in _ROW_VIEWS:  # names from the fixed lists above
        con.execute(f"DROP VIEW IF EXISTS {v}")
    for t in _ROW_TABLES:
        con.execute(f"DROP TABLE IF EXISTS {t}")
    duck.release_arrow_memory()
    duck.release_duckdb_memory(con)


def _nccl_kernel_names(con: duckdb.DuckDBPyConnection, opened: Opened) -> None:
    """Table nccl_kernel_names: what each NCCL kernel name of the report says (op, algorithm,
    protocol, reduction, type)."""
    if opened.nccl_names is not None:  # parsed by the C scan: those its kernels use
        used = {i for (i,) in con.execute("SELECT DISTINCT shortName FROM src_kernels").fetchall()}
        kernel_names = [n for n in opened.nccl_names if n[0] in used]
    else:
        kernel_names = nccl_kernel_names(
            con.execute("""
            SELECT DISTINCT s.id, s.value FROM r.StringIds s
            WHERE s.id IN (SELECT DISTINCT shortName FROM src_kernels) AND s.value LIKE 'nccl%'
        """).fetchall()
        )
    kn = pd.DataFrame(kernel_names, columns=["id", "name", "op", "algo", "proto", "redop", "dtype"])
    # a plain table: the cursor that reads the compute kernels (below) sees it
    con.execute("""CREATE TABLE nccl_kernel_names (id BIGINT, name VARCHAR, op VARCHAR, algo VARCHAR,
                   proto VARCHAR, redop VARCHAR, dtype VARCHAR)""")
    if len(kn):
        con.register("kernel_names_df", kn)
        con.execute("INSERT INTO nccl_kernel_names SELECT * FROM kernel_names_df")


def _start_islands(
    pool: ThreadPoolExecutor, con: duckdb.DuckDBPyConnection, opened: Opened, kernels_read: threading.Event
) -> Future[IslandsAndKernels]:
    """The compute kernels' busy islands, to be made as they are read after the calls (made on
    the pool's thread in DuckDB where the kernels do not fit in memory)."""
    if opened.compute is not None:
        return pool.submit(lambda c: (islands_by_process(c), c), opened.compute)
    kernels = duck.scalar(con, "SELECT count(*) FROM src_kernels")
    return pool.submit(_compute_islands, con, kernels_read, fits_in_memory(kernels, duck.memory_limit_bytes(con)))


def _nccl_kernels(
    con: duckdb.DuckDBPyConnection, kernels_read: threading.Event, warnings: list[str], report: str
) -> None:
    """Table nccl_kernels: the NCCL kernels with their launches; those without a time dropped."""
    con.execute(f"CREATE TEMP TABLE nccl_kernels AS {duck.sql('nccl_kernels')}")
    kernels_read.set()
    # the launches are in nccl_kernels now: their memory serves the next steps
    con.execute("DROP TABLE IF EXISTS src_runtime")
    bad = duck.scalar(con, "SELECT count(*) FROM nccl_kernels WHERE kstart IS NULL OR kend IS NULL")
    if bad:
        con.execute("DELETE FROM nccl_kernels WHERE kstart IS NULL OR kend IS NULL")
        warnings.append(f"{report}: {bad} NCCL kernel(s) without start or end time ignored (damaged export?)")


def _own_launches(con: duckdb.DuckDBPyConnection) -> None:
    """Table innermost: for each NCCL kernel's launch, the innermost wrapper range and PyTorch
    range holding it."""
    # range joins here and in gpu_metrics have small estimated sides: below merge_join_threshold
    # DuckDB would plan piecewise merge joins, quadratic here (and unimplemented for some joins)
    con.execute("SET merge_join_threshold = 0")
    con.execute(_RANGES)
    con.execute(_INNERMOST)
    # a kind without ranges owns nothing: its lookup is skipped (with the wrapper on and no
    # PyTorch range, the second lookup still cost a scan of every launch)
    kinds = {k for (k,) in con.execute("SELECT DISTINCT kind FROM ranges").fetchall()}
    for kind in ("wrapper", "torch_range"):
        if kind not in kinds:
            continue
        con.execute(_LAUNCH_OWNERS, {"kind": kind})
        if duck.scalar(con, "SELECT count(*) FROM innermost WHERE NOT holds"):
            _look_up_held(con)


def _busy_at_edges(
    pool: ThreadPoolExecutor,
    con: duckdb.DuckDBPyConnection,
    calls: pa.Table,
    compute: Future[IslandsAndKernels],
) -> tuple[pa.Table, Future[pd.DataFrame] | None]:
    """The calls with the compute busy at their edges, and the kernels in each call's gap (the
    late-arrival diagnosis) being found on the pool's thread, None when the compute kernels did not
    fit in memory."""
    by_device, kernels = compute.result()
    # what each call's device ran since the previous call, by kernel name, on the report's cores
    # while this thread goes on (its work is short)
    gap_rows = pool.submit(gap_kernels.top_in_gaps, calls, kernels, duck.threads(con)) if kernels is not None else None
    del kernels
    calls = busy_at_edges(calls, by_device) if by_device is not None else busy_at_edges_in_duckdb(calls, con)
    return calls, gap_rows


# what _report_reads() gives: the session's start, the nsys version, the long host calls and NVTX
# ranges (_host_tables), and the compute kernels' names by id (None: read once the gaps are known)
ReportReads = tuple[int | None, str | None, pd.DataFrame | None, pd.DataFrame | None, dict[int, str] | None]


def _start_report_reads(
    pool: ThreadPoolExecutor,
    con: duckdb.DuckDBPyConnection,
    tables: dict[str, set[str]],
    opened: Opened,
    attached: bool,
) -> Future[ReportReads] | None:
    """_report_reads() on the pool's thread, on a cursor of its own, while this thread makes the
    calls: none of them reads the calls, and the calls' statements keep one core busy, not two
    (each part's tables hold fewer rows than DuckDB hands a thread at a time). None, to be read
    on this thread once the report's rows are let go of (_drop_rows), where the database runs on
    one thread (a small report, a pool worker's share of the cores), under a memory limit (the
    two queries' working memory would meet under it), or where the report is not an attached
    SQLite file (an Arrow export's tables are this connection's own, which a cursor does not see)."""
    if not attached or duck.limited() or duck.threads(con) < 2:
        return None
    cur = duck.quiet(con.cursor())

    def run() -> ReportReads:
        try:
            return _report_reads(cur, tables, opened, opened.compute)
        finally:
            cur.close()

    return pool.submit(run)


def _report_reads(
    con: duckdb.DuckDBPyConnection, tables: dict[str, set[str]], opened: Opened, compute: ComputeKernels | None
) -> ReportReads:
    """What the extraction reads from the attached report (r) alone; the compute kernels' names
    when ``compute`` is given (gap_kernels.compute_names: those of the gaps are among them)."""
    host_calls, host_ranges = _host_tables(con, tables, opened.long_ranges)
    names = gap_kernels.compute_names(compute, con) if compute is not None and compute_columns.count(compute) else None
    return _session_start(con, tables), _version(con, tables), host_calls, host_ranges, names


def _session_start(con: duckdb.DuckDBPyConnection, tables: dict[str, set[str]]) -> int | None:
    """When the capture session started, ns on the wall clock (UTC)."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        return None
    row = con.execute("SELECT min(utcEpochNs) FROM r.TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _host_tables(
    con: duckdb.DuckDBPyConnection, tables: dict[str, set[str]], long_ranges: int | None
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The long host calls (OS runtime) and the long NVTX ranges, None where the report lacks
    their table."""
    host_calls = (
        duck.frame(con.execute(duck.sql("host_calls_nsys"), {"min_ns": HOST_CALL_MIN_NS}))
        if "OSRT_API" in tables
        else None
    )
    nvtx_cols = tables.get("NVTX_EVENTS", set())
    host_ranges = None
    if {"start", "end", "globalTid", "eventType", "text", "textId"} <= nvtx_cols:
        # the C scan counted the ranges this query could keep: none, and its second pass over
        # NVTX_EVENTS (the whole table, through DuckDB's scanner) is skipped
        host_ranges = (
            _NO_HOST_RANGES.copy()
            if long_ranges == 0
            else duck.frame(con.execute(duck.sql("host_ranges_nsys"), {"min_ns": HOST_CALL_MIN_NS}))
        )
    return host_calls, host_ranges


def _look_up_held(con: duckdb.DuckDBPyConnection) -> None:
    """Launches whose latest-starting range had ended: their holder by the general range join."""
    con.execute("CREATE OR REPLACE TEMP TABLE unheld AS SELECT kid, kind FROM innermost WHERE NOT holds")
    con.execute("DELETE FROM innermost WHERE NOT holds")
    con.execute(_RANGE_THREADS)
    con.execute(_LAUNCH_HOLDERS)
    con.execute(
        "INSERT INTO innermost SELECT h.kid, h.kind, h.rid, true FROM held h "
        "JOIN unheld u ON u.kid = h.kid AND u.kind = h.kind"
    )


def _compute_islands(
    con: duckdb.DuckDBPyConnection, kernels_read: threading.Event, in_memory: bool
) -> IslandsAndKernels:
    """The islands as busy.islands_by_process() makes them and the compute kernels' arrays, or (None, None):
    the islands made as table compute_islands instead (busy.islands_in_duckdb), for kernels that
    do not fit in memory."""
    cur = duck.quiet(con.cursor())
    try:
        if not in_memory:
            islands_in_duckdb(cur)
            kernels_read.wait()
            cur.execute("DROP TABLE IF EXISTS src_kernels")
            return None, None
        compute = cur.execute(duck.sql("compute_kernels")).fetchnumpy()
        # once the caller has read src_kernels too, its memory serves the next steps (a lower
        # peak on a large report)
        kernels_read.wait()
        cur.execute("DROP TABLE IF EXISTS src_kernels")
        return islands_by_process(compute), compute
    finally:
        cur.close()


def _version(con: duckdb.DuckDBPyConnection, tables: dict[str, set[str]]) -> str | None:
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables:
            row = con.execute(f"SELECT value FROM r.{t} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
            if row:
                return row[0]
    return None


def extract_arrow(path: Path, report: str | None = None, threads: int | None = None) -> Extract:
    """An Arrow export (nsyscomm.ingest.nsys.arrow) -> its Extract, the same as of the SQLite export
    of that report."""
    from nsyscomm.ingest.nsys import arrow as nsys_arrow

    path = Path(path)
    try:
        if not nsys_arrow._has_payloads(path):
            return _extract(path, report or path.name, threads)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="nsyscomm-") as tmp:
            e = extract(nsys_arrow.to_sqlite(path, Path(tmp) / "report.sqlite"), report or path.name, threads)
        e.path = path
        return e
    except duckdb.Error as e:
        if isinstance(e, duckdb.OutOfMemoryException) or duck.interrupted(e):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(
            f"{path}: cannot read this Arrow export ({first}); "
            f"export the report again with: nsys export --type arrow REPORT.nsys-rep"
        ) from None
