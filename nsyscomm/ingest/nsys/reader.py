"""An nsys SQLite export's tables, read into DuckDB: the first stage of the ingest.

Schema differences between nsys versions are absorbed here, once: every table the SQL needs
gets a stand-in with fixed columns (an empty one when nsys did not create the table because
nothing of that kind was captured). Each table is read from SQLite once; every later step
(nsyscomm.ingest.nsys.extract, sql/) reads DuckDB's copy, never the report again.

Two ways in, with the same tables out. Where the C extension nsyscomm.ingest.nsys._sqlite_scan was
built, SQLite's own C API scans the three big tables on every core and keeps only the rows the
later steps use (``_scan``): the NCCL kernels, their launches, the named ranges, the compute
kernels' times as numpy arrays, and each process's first and last event. Otherwise, when the
kernels would not fit in a quarter of DuckDB's memory limit (``fits_in_memory``: the arrays are
outside it), or when that scan meets something unexpected, DuckDB's SQLite scanner copies the
tables whole (``_copy_tables``), and DuckDB spills past its limit. tests/extract/test_sqlite_scan.py and
tests/extract/test_memory_routes.py check that both give the same extract.

Needs no pandas: the command line gives a lone report a head start (``head_start``), reading it
while the rest of nsyscomm is imported (mostly pandas, the larger part of the start-up).
"""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import duckdb

from nsyscomm import duck
from nsyscomm.errors import InputError
from nsyscomm.ingest import compute_columns, limits
from nsyscomm.ingest.nsys import sqlite_guard
from nsyscomm.ingest.nsys.scan_arrow import (
    MESSAGE_FIELDS,
    arrow_table,
    column_or_null,
    ranges_table,
    registered_names,
    rows_sql,
    sqlite_scan_module,
)

SQLITE_MAGIC = b"SQLite format 3\x00"

# Prefixes of NVTX names that matter to us, so the NVTX scan can drop everything else early.
_RANGE_PATTERNS = ("nsyscomm%", "nccl%", "gloo:%", "ProfilerStep#%")

_UNPARSED = "false AS parsed, " + ", ".join(f"NULL::{t} AS msg_{f}" for f, t in MESSAGE_FIELDS.items())


# The compute kernels' columns as _sqlite_scan keeps them (COMPUTE_WIDTH there; a byte more per
# kernel says whether it has a name)
COMPUTE_TYPES = {"pid": "int32", "device": "int32", "start": "int64", "end": "int64", "name": "int32"}

# Memory the in-memory route takes per kernel at its peak: the compute kernels' columns (29 bytes
# as _sqlite_scan holds them, COMPUTE_TYPES and whether each has a name), their busy islands (24
# bytes an island, about one a kernel) and what busy.islands() and gap_kernels take meanwhile;
# an NCCL kernel held by the scan with its launch takes about as much.
IN_MEMORY_BYTES_PER_KERNEL = 110


def fits_in_memory(kernels: int, memory_limit: int | None) -> bool:
    """Whether a report's kernels can take the in-memory route: the C scan and numpy islands,
    both outside DuckDB's memory limit. Up to a quarter of the limit, so that the process stays
    within 1.25 times it (plus the interpreter and what grows with calls); past it, DuckDB's copy
    of the tables and the islands in SQL, which spill. No limit known: in memory."""
    return memory_limit is None or kernels * IN_MEMORY_BYTES_PER_KERNEL <= memory_limit // 4


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def table_columns(path: Path) -> dict[str, set[str]]:
    """Table -> column names, read through Python's sqlite3 in read-only mode."""
    try:
        con = sqlite3.connect(read_only_uri(path), uri=True)
        try:
            sqlite_guard.check_tables(con, path)  # before any route reads a row
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")]
            # table names come from the report: a parameter, never SQL text
            return {n: {r[0] for r in con.execute("SELECT name FROM pragma_table_info(?)", (n,))} for n in names}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise InputError(
            f"{path}: not a readable SQLite database ({e}); "
            f"export the report again with: nsys export --type sqlite REPORT.nsys-rep"
        ) from None


def _col(cols: set[str], name: str) -> str:
    return f'"{name}"' if name in cols else f'NULL AS "{name}"'


def _copy_tables(con, tables: dict[str, set[str]], warnings: list[str]) -> None:
    """Read each source table once into DuckDB (SQLite is scanned once per table: that scan is
    the cost floor); every later step reads these tables, never the report again. They are
    plain tables, not TEMP ones, so that cursors of the connection (busy islands) see them."""
    scans = []
    k = tables.get("CUPTI_ACTIVITY_KIND_KERNEL")
    if k is not None:
        scans.append(f"""CREATE TABLE src_kernels AS
            SELECT start, "end", deviceId, streamId, correlationId, {_col(k, "globalPid")}, shortName
            FROM r.CUPTI_ACTIVITY_KIND_KERNEL""")
    else:
        # stand-ins are tables, not views: sql/nccl_kernels.sql keys the kernels by their rowid,
        # and nsyscomm.ingest.nsys.extract drops the tables it has read
        con.execute("""CREATE TABLE src_kernels (start BIGINT, "end" BIGINT, deviceId BIGINT, streamId BIGINT,
            correlationId BIGINT, globalPid BIGINT, shortName BIGINT)""")
    rt = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME")
    if rt is not None:
        scans.append("""CREATE TABLE src_runtime AS
            SELECT start, "end", globalTid, correlationId FROM r.CUPTI_ACTIVITY_KIND_RUNTIME
            WHERE start IS NOT NULL AND globalTid IS NOT NULL""")
    else:
        con.execute('CREATE TABLE src_runtime (start BIGINT, "end" BIGINT, globalTid BIGINT, correlationId BIGINT)')
    nv = tables.get("NVTX_EVENTS")
    if nv is not None:
        like_text = " OR ".join(f"e.text LIKE '{p}'" for p in _RANGE_PATTERNS)
        like_str = " OR ".join(f"value LIKE '{p}'" for p in _RANGE_PATTERNS)
        text_id = "e.textId" if "textId" in nv else "NULL"
        # Registered strings (textId) are resolved only for the few names that can matter; every
        # other range keeps only its times (for the process's elapsed time), not its text
        con.execute(
            f"CREATE TABLE rel_strings AS SELECT id, {limits.cut_sql('value')} AS value "
            f"FROM r.StringIds WHERE {like_str}"
        )
        scans.append(f"""CREATE TABLE src_nvtx AS
            SELECT e.start, coalesce(e."end", e.start) AS "end", e.globalTid,
                   CASE WHEN s.id IS NOT NULL THEN s.value WHEN {like_text} THEN {limits.cut_sql("e.text")} END AS name
            FROM r.NVTX_EVENTS e LEFT JOIN rel_strings s ON s.id = {text_id}
            WHERE e.eventType IN (34, 59, 60)""")
    # One table after the other, each scan on every core (the SQLite scanner splits a table by
    # rowid); insertion order is not kept: with it, copying the rows cost twice as much
    con.execute("SET preserve_insertion_order = false")
    for q in scans:
        con.execute(q)
    con.execute("SET preserve_insertion_order = true")
    # the named ranges, numbered (rid), with the same columns as the C scan's (_ranges); _check
    # makes src_ranges of them
    con.execute(
        f'CREATE TABLE range_rows AS SELECT start, "end", globalTid, name, {_UNPARSED} '
        + (
            "FROM src_nvtx WHERE name IS NOT NULL"
            if nv is not None
            else 'FROM (SELECT NULL::BIGINT AS start, NULL::BIGINT AS "end", NULL::BIGINT AS globalTid, '
            "NULL::VARCHAR AS name) WHERE false"
        )
    )
    con.execute("CREATE TEMP VIEW src_ranges_all AS SELECT rowid AS rid, * FROM range_rows")
    # every event of a process, for its elapsed time (mpitrace's "elapsed")
    parts = []
    if nv is not None:
        parts.append(
            'SELECT (globalTid >> 24) & 16777215 AS pid, start, "end" FROM src_nvtx WHERE globalTid IS NOT NULL'
        )
    if rt is not None:
        parts.append('SELECT (globalTid >> 24) & 16777215 AS pid, start, "end" FROM src_runtime')
    if k is not None and "globalPid" in k:
        parts.append('SELECT (globalPid >> 24) & 16777215 AS pid, start, "end" FROM src_kernels')
    if not parts:
        parts.append('SELECT NULL::BIGINT AS pid, NULL::BIGINT AS start, NULL::BIGINT AS "end" WHERE false')
    # UNION ALL BY NAME: the branches present differ from report to report
    con.execute("CREATE TEMP VIEW src_events AS " + " UNION ALL BY NAME ".join(parts))


def _check(con, tables: dict[str, set[str]], warnings: list[str]) -> None:
    # a range without a start or a thread cannot be placed: say so instead of guessing. A filter
    # only then: DuckDB pushes it into its scan of ranges held in Arrow, through pyarrow's dataset
    # scanner
    bad = con.execute("SELECT count(*) FROM src_ranges_all WHERE start IS NULL OR globalTid IS NULL").fetchone()[0]
    con.execute(
        "CREATE TEMP VIEW src_ranges AS SELECT * FROM src_ranges_all"
        + (" WHERE start IS NOT NULL AND globalTid IS NOT NULL" if bad else "")
    )
    if bad:
        warnings.append(f"{bad} NVTX range(s) without a start time or thread ignored (damaged export?)")
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"):
        if t not in tables and not (t == "CUPTI_ACTIVITY_KIND_KERNEL" and _cpu_only(con, tables)):
            warnings.append(f"table {t} is absent (nothing of that kind was captured)")


def _cpu_only(con, tables: dict[str, set[str]]) -> bool:
    """A job that used no CUDA at all (gloo on CPU): NVTX ranges, and neither a CUDA API call nor
    an NCCL name. It has no kernels to capture; their absence is no news."""
    if "NVTX_EVENTS" not in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" in tables or "StringIds" not in tables:
        return False
    return con.execute("SELECT NOT EXISTS (SELECT 1 FROM r.StringIds WHERE value LIKE 'nccl%')").fetchone()[0]


def _scan(con, path: Path, tables: dict[str, set[str]], cancel: bytearray):
    """The three big tables through nsyscomm.ingest.nsys._sqlite_scan (module docstring): the same
    src_kernels (its NCCL kernels only), src_runtime (their launches only), src_ranges_all (in
    Arrow) and src_events (each process's first start and last end) as _copy_tables, and the
    compute kernels' pid, device, start and end as numpy arrays, returned with the NCCL kernel
    names it parsed (nsyscomm.ingest.names.nccl_kernel_names). None: the extension
    is not built, the kernels do not fit in memory (fits_in_memory), or the scan met something
    unexpected; nothing was created then."""
    _sqlite_scan = sqlite_scan_module()
    if _sqlite_scan is None:
        return None
    import numpy as np

    from nsyscomm.ingest.names import nccl_kernel_names

    k, rt, nv = (tables.get(t) for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"))
    uri = read_only_uri(path)
    parts = duck.threads(con)
    kcols = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName"]
    text_id = column_or_null(nv, "textId") if nv is not None else "NULL"
    lite = sqlite3.connect(uri, uri=True)
    try:
        # the names that matter, as the copy's statements read them: the ranges' (nccl% among
        # them), and the NCCL kernels' out of those
        rel = registered_names(lite, _RANGE_PATTERNS)
        if rel is None:  # DuckDB's reading, its errors included (LIKE is case-sensitive there)
            like = " OR ".join(f"value LIKE '{p}'" for p in _RANGE_PATTERNS)
            rel = con.execute(
                f"SELECT id, {limits.cut_sql('value')} FROM r.StringIds WHERE {like} ORDER BY id"
            ).fetchall()
        nccl_names = nccl_kernel_names((i, v) for i, v in rel if v.startswith("nccl"))
        nccl_ids = np.array([n[0] for n in nccl_names], np.int64)

        def bounds(table):  # names from the fixed list above
            if table not in tables:
                return 1, 0
            # two statements: SQLite reads min() or max() of the rowid off the b-tree's edge only
            # when it is the query's one aggregate (both at once scan the table)
            lo = lite.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
            hi = lite.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
            return (lo, hi) if lo is not None else (1, 0)

        kernel_rows = bounds("CUPTI_ACTIVITY_KIND_KERNEL")
        if not fits_in_memory(kernel_rows[1] - kernel_rows[0] + 1, duck.memory_limit_bytes(con)):
            return None  # DuckDB's copy, which spills past the limit
        out = _sqlite_scan.scan(
            uri,
            rows_sql(
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "nsyscomm_kernel",
                f'start, "end", deviceId, streamId, correlationId, {column_or_null(k, "globalPid")}, shortName',
            )
            if k is not None
            else None,
            *kernel_rows,
            rows_sql("CUPTI_ACTIVITY_KIND_RUNTIME", "nsyscomm_launch", 'start, "end", globalTid, correlationId')
            if rt is not None
            else None,
            *bounds("CUPTI_ACTIVITY_KIND_RUNTIME"),
            rows_sql("NVTX_EVENTS", "nsyscomm_range", f'start, "end", eventType, globalTid, {text_id}, text')
            if nv is not None
            else None,
            *bounds("NVTX_EVENTS"),
            parts,
            nccl_ids,
            np.array([i for i, _ in rel], np.int64),
            [v.encode() for _, v in rel],
            cancel,
            limits.HOST_MIN_NS,
        )
    except (ValueError, sqlite3.Error):
        return None  # the copy has the reference behaviour for what the scan did not expect
    finally:
        lite.close()
    kernels = arrow_table(out["kernels"], kcols)
    launches = arrow_table(out["runtime"], ["start", "end", "globalTid", "correlationId"])
    nvtx = out["nvtx"]
    # as the scan keeps them (int32 but for the times), read in place, then made narrower for
    # the time they are held (compute_columns)
    compute = {n: np.frombuffer(out["kernels"].pop(f"compute_{n}"), t) for n, t in COMPUTE_TYPES.items()}
    # kernels without a name are compute kernels only in a report without NCCL kernels
    # (sql/compute_kernels.sql: NULL NOT IN (empty set) is true)
    named = np.frombuffer(out["kernels"]["compute_named"], np.uint8).astype(bool)
    if len(kernels) and not named.all():
        compute = {n: a[named] for n, a in compute.items()}
    compute = compute_columns.narrow(compute)
    # from_arrow(): half the cost of register() + CREATE + unregister(), which is most of
    # what a small report costs here
    con.from_arrow(kernels).create("src_kernels")
    con.from_arrow(launches).create("src_runtime")
    # the ranges stay in Arrow, read where they are (a copy into DuckDB costs more)
    con.register("src_ranges_all", ranges_table(nvtx))
    spans = out["spans"] or [(None, None, None)]
    values = ", ".join(["(?::BIGINT, ?::BIGINT, ?::BIGINT)"] * len(spans))
    con.execute(
        f'CREATE TEMP TABLE span_parts AS SELECT * FROM (VALUES {values}) v(pid, start, "end") WHERE pid IS NOT NULL',
        [x for row in spans for x in row],
    )
    con.execute("CREATE TEMP VIEW src_events AS SELECT * FROM span_parts")
    return compute, nccl_names, int(out["long_ranges"])


def read_only_uri(path: str | os.PathLike) -> str:
    """SQLite URI of the report at path, read-only and immutable (nothing is ever written to a
    report); the path percent-encoded as the bytes it is on disk, so that '?', '#' or '%' in it
    stay part of it and a name that is not UTF-8 reaches SQLite as it is."""
    return f"file:{quote(os.fsencode(Path(path).resolve()))}?mode=ro&immutable=1"


@dataclass
class Opened:
    """A report read into a new in-memory DuckDB database (the report itself attached as r)."""

    con: duckdb.DuckDBPyConnection
    tables: dict[str, set[str]]  # the report's tables and their columns
    warnings: list[str] = field(default_factory=list)
    compute: dict | None = None  # the compute kernels when _scan read them
    nccl_names: list | None = None  # the NCCL kernel names it parsed, then
    # how many NVTX ranges may be the program's own long ones (sql/host_ranges_nsys.sql), as _scan
    # counted them; None: not counted (that query must run to know)
    long_ranges: int | None = None


def open_report(path: Path, threads: int | None = None) -> Opened:
    """Read the report at path, or take what head_start() read of it."""
    started = _head_starts.pop(_identity(path), None)
    if started is not None:
        try:
            return started[0].result()  # its failure is raised here, as if read now
        except BaseException:
            _stop(*started)  # Ctrl-C while waiting: the reading stops too
            raise
    return _read(path, duck.connect(sqlite=True, threads=threads), bytearray(1))


def _stop(started: Future, con, cancel: bytearray) -> None:
    if not started.done():
        cancel[0] = 1  # _scan's threads look at it every 4096 rows
        con.interrupt()
    try:
        started.result()
    except BaseException:  # noqa: BLE001 - the reading's own error, or its interruption
        pass
    con.close()


def _read(path: Path, con, cancel: bytearray) -> Opened:
    try:
        tables = table_columns(path)
        if not {"StringIds"} & tables.keys() or not (
            {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "PROCESSES", "META_DATA_EXPORT", "EXPORT_META_DATA"}
            & tables.keys()
        ):
            raise InputError(
                f"{path}: SQLite file without nsys tables (StringIds, NVTX_EVENTS, CUPTI_*); "
                f"pass an nsys export made with: nsys export --type sqlite REPORT.nsys-rep"
            )
        # ATTACH takes no parameters; the path is quoted as a SQL string literal. DuckDB's scanner
        # takes no immutable URI: a WAL-mode report is read from a private copy (sqlite_guard)
        quoted = os.path.abspath(sqlite_guard.duckdb_path(path)).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS r (TYPE sqlite, READ_ONLY)")
        warnings: list[str] = []
        scanned = _scan(con, path, tables, cancel)
        if cancel[0]:
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        if scanned is None:
            _copy_tables(con, tables, warnings)
        _check(con, tables, warnings)
        compute, nccl_names, long_ranges = scanned or (None, None, None)
        return Opened(con, tables, warnings, compute, nccl_names, long_ranges)
    except BaseException:
        con.close()
        raise


# report (path, size, mtime) -> its reading (and the database it reads into), begun by
# head_start and not yet taken
_head_starts: dict[tuple, tuple[Future, duckdb.DuckDBPyConnection, bytearray]] = {}


def _identity(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def head_start(path: Path) -> None:
    """Begin reading the report in a background thread; open_report() takes the result. The C
    scan (or DuckDB) reads without the GIL, so the caller's imports run meanwhile. The database
    is made here, in the caller's thread, with the caller's settings (memory limit)."""
    path = Path(path)
    key = _identity(path)
    if key not in _head_starts:
        con = duck.connect(sqlite=True)
        cancel = bytearray(1)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsyscomm-read")
        _head_starts[key] = (pool.submit(_read, path, con, cancel), con, cancel)
        pool.shutdown(wait=False)


def drop_head_starts() -> None:
    """Stop and close what head_start() began and nobody took: the run failed or was interrupted
    first (Ctrl-C during the imports must not wait for a whole report to be read)."""
    while _head_starts:
        _stop(*_head_starts.popitem()[1])
