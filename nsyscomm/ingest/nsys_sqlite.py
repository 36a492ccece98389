"""nsys SQLite export -> rows of the normalized `collectives` table (one report).

Schema differences between nsys versions are absorbed here, once: every table the
SQL needs gets a stand-in view with fixed columns (an empty one when nsys did not
create the table because nothing of that kind was captured).
"""

from __future__ import annotations

import sqlite3
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd

from nsyscomm import duck
from nsyscomm.errors import InputError
from nsyscomm.ingest import gpu_metrics, nccl_payload
from nsyscomm.ingest.busy import busy_at_edges, islands
from nsyscomm.ingest.names import parse_kernel

SQLITE_MAGIC = b"SQLite format 3\x00"

# Prefixes of NVTX names that matter to us, so the NVTX scan can drop everything else early.
_RANGE_PATTERNS = ("nsyscomm%", "nccl%", "gloo:%", "ProfilerStep#%")


# Input `innermost` of sql/calls_nsys.sql (see there): per NCCL kernel and kind of range, the
# innermost range containing its launch on the same thread. First an ASOF join: the range of
# that kind that started last at or before the launch on its thread; when it still runs at the
# launch it is the innermost one holding it (any other holder started earlier). Otherwise (it
# ended before the launch: a sibling, the launch may sit in an outer range) the launch is looked
# up again by _LAUNCH_HOLDERS.
_LAUNCH_OWNERS = """CREATE TEMP TABLE innermost AS
SELECT l.kid, l.kind, r.rid, r."end" >= l.ts AS holds
FROM (SELECT k.kid, k.launch_tid AS tid, k.launch_start AS ts, kd.kind
      FROM nccl_kernels k, (VALUES ('wrapper'), ('torch_range')) kd(kind)
      WHERE k.launch_start IS NOT NULL) l
ASOF JOIN ranges r ON r.globalTid = l.tid AND r.kind = l.kind AND l.ts >= r.start"""
# The general lookup, for the launches the ASOF join left (kernels of table `unheld`): every
# range holding the launch, the latest-starting wins. The same-thread containment runs as a pure
# range join (IEJoin) on one number line: thread index * stride + (t - t0), with stride > the
# ranges' time span, so threads never interleave (an equality on the thread plans as a slow hash
# join, DESIGN.md). Launches outside [t0, t1] get no key: no range holds them.
_LAUNCH_HOLDERS = """CREATE TEMP TABLE held AS
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
_RANGES = """CREATE TEMP TABLE ranges AS
SELECT row_number() OVER () AS rid, start, "end", globalTid, name,
       CASE WHEN name LIKE 'nsyscomm:%' THEN 'wrapper' ELSE 'torch_range' END AS kind
FROM src_ranges
WHERE name LIKE 'nsyscomm:%' OR name LIKE 'nccl:%' OR name LIKE 'gloo:%'"""
_RANGE_THREADS = """CREATE TEMP TABLE range_threads AS
SELECT d.globalTid, (row_number() OVER (ORDER BY d.globalTid) - 1) * b.stride - b.t0 AS base, b.t0, b.t1
FROM (SELECT DISTINCT globalTid FROM src_ranges WHERE globalTid IS NOT NULL) d,
     (SELECT min(start) AS t0, max("end") AS t1, max("end") - min(start) + 1 AS stride FROM src_ranges) b"""


@dataclass
class Extract:
    """What one report contributes to a job: its calls and what ranks them."""

    report: str
    path: Path
    calls: pd.DataFrame                 # collectives columns except rank/local_rank/host/report
    markers: pd.DataFrame               # pid, rank, local_rank, world, host
    spans: pd.DataFrame                 # pid, first_ns, last_ns: the process's whole time span
    session_start_utc_ns: int | None = None
    nsys_version: str | None = None
    warnings: list[str] = field(default_factory=list)
    links: pd.DataFrame | None = None   # link-counter sums under the calls (nsyscomm.ingest.gpu_metrics)


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def _tables(path: Path) -> dict[str, set[str]]:
    """Table -> column names, read through Python's sqlite3 in read-only mode."""
    uri = f"file:{path.resolve().as_posix()}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")]
            # table names come from the report: a parameter, never SQL text
            return {n: {r[0] for r in con.execute("SELECT name FROM pragma_table_info(?)", (n,))} for n in names}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise InputError(f"{path}: not a readable SQLite database ({e}); "
                         f"export the report again with: nsys export --type sqlite REPORT.nsys-rep") from None


def _col(cols: set[str], name: str, alias: str | None = None, table: str = "") -> str:
    prefix = f"{table}." if table else ""
    return f'{prefix}"{name}"' if name in cols else f"NULL AS \"{alias or name}\""


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
        e = _extract(copy, report, threads)
    e.path = path
    e.warnings.append(f"{report}: {fixed} string(s) were not valid UTF-8; read with the bad bytes replaced")
    return e


_TEXT_COLUMNS = {"StringIds": ("value",), "NVTX_EVENTS": ("text", "jsonText")}


def _utf8_copy(path: Path, dst: Path) -> tuple[Path, int]:
    fixed = 0

    def fix(b):
        nonlocal fixed
        text = bytes(b).decode("utf-8", "replace")
        if "\ufffd" in text:
            fixed += 1
        return text

    src = sqlite3.connect(f"file:{path.resolve().as_posix()}?mode=ro&immutable=1", uri=True)
    out = sqlite3.connect(dst)
    try:
        src.backup(out)
        out.create_function("nsyscomm_utf8", 1, fix, deterministic=True)
        tables = _tables(dst)
        for table, cols in _TEXT_COLUMNS.items():  # names from the fixed list above
            for c in cols:
                if c in tables.get(table, ()):
                    out.execute(f'UPDATE "{table}" SET "{c}" = nsyscomm_utf8(CAST("{c}" AS BLOB)) '
                                f'WHERE typeof("{c}") = \'text\'')
        out.commit()
    finally:
        src.close()
        out.close()
    return dst, fixed


def _extract(path: Path, report: str, threads: int | None) -> Extract:
    tables = _tables(path)
    warnings: list[str] = []
    if not {"StringIds"} & tables.keys() or not ({"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "PROCESSES",
                                                  "META_DATA_EXPORT", "EXPORT_META_DATA"} & tables.keys()):
        raise InputError(f"{path}: SQLite file without nsys tables (StringIds, NVTX_EVENTS, CUPTI_*); "
                         f"pass an nsys export made with: nsys export --type sqlite REPORT.nsys-rep")

    con = duck.connect(sqlite=True, threads=threads)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        # ATTACH takes no parameters; the path is quoted as a SQL string literal
        quoted = str(path.resolve()).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS r (TYPE sqlite, READ_ONLY)")
        _make_views(con, tables, warnings)
        names = con.execute("""
            SELECT DISTINCT s.id, s.value FROM r.StringIds s
            WHERE s.id IN (SELECT DISTINCT shortName FROM src_kernels) AND s.value LIKE 'nccl%'
        """).fetchall()
        parsed = [(i, v, *parse_kernel(v)) for i, v in names]
        parsed = [p for p in parsed if p[2] is not None or p[1].startswith(("ncclDevKernel", "ncclKernel", "ncclSym"))]
        kn = pd.DataFrame(parsed, columns=["id", "name", "op", "algo", "proto", "redop", "dtype"])
        # a plain table: the cursor that reads the compute kernels (below) sees it
        con.execute("""CREATE TABLE nccl_kernel_names (id BIGINT, name VARCHAR, op VARCHAR, algo VARCHAR,
                       proto VARCHAR, redop VARCHAR, dtype VARCHAR)""")
        if len(kn):
            con.register("kernel_names_df", kn)
            con.execute("INSERT INTO nccl_kernel_names SELECT * FROM kernel_names_df")
        # compute busy islands do not depend on the calls: made on a second core meanwhile
        compute = pool.submit(_compute_islands, con)
        con.execute(f"CREATE TEMP TABLE nccl_kernels AS {duck.sql('nccl_kernels')}")
        bad = con.execute("SELECT count(*) FROM nccl_kernels WHERE kstart IS NULL OR kend IS NULL").fetchone()[0]
        if bad:
            con.execute("DELETE FROM nccl_kernels WHERE kstart IS NULL OR kend IS NULL")
            warnings.append(f"{report}: {bad} NCCL kernel(s) without start or end time ignored (damaged export?)")
        con.execute(_RANGES)
        con.execute(_LAUNCH_OWNERS)
        if con.execute("SELECT count(*) FROM innermost WHERE NOT holds").fetchone()[0]:
            _look_up_held(con)
        calls = duck.frame(con.execute(duck.sql("calls_nsys")))
        unlaunched = con.execute("SELECT count(*) FROM nccl_kernels WHERE launch_start IS NULL").fetchone()[0]
        if unlaunched:
            warnings.append(f"{report}: {unlaunched} NCCL kernel(s) have no launch call in the report "
                            f"(capture window edge); counted from the kernel name alone")
        markers = con.execute(r"""
            SELECT DISTINCT ((globalTid >> 24) & 16777215) AS pid,
                   TRY_CAST(regexp_extract(name, '\|rank=([0-9]+)', 1) AS INTEGER)       AS rank,
                   TRY_CAST(regexp_extract(name, '\|local_rank=([0-9]+)', 1) AS INTEGER) AS local_rank,
                   TRY_CAST(regexp_extract(name, '\|world=([0-9]+)', 1) AS INTEGER)      AS world,
                   nullif(regexp_extract(name, '\|host=([^|]*)', 1), '')                  AS host
            FROM src_ranges WHERE name LIKE 'nsyscomm.rank|%' AND globalTid IS NOT NULL
        """).df()
        # NCCL's own NVTX payloads: sizes, communicators and ranks for calls without the wrapper
        calls, markers = nccl_payload.apply(con, tables, calls, markers, warnings, report, path)
        spans = duck.frame(con.execute(duck.sql("process_spans")))
        calls = busy_at_edges(calls, compute.result())
        links = gpu_metrics.link_usage(con, tables, calls, warnings, report)
        session = None
        if "TARGET_INFO_SESSION_START_TIME" in tables:
            row = con.execute("SELECT min(utcEpochNs) FROM r.TARGET_INFO_SESSION_START_TIME").fetchone()
            session = int(row[0]) if row and row[0] is not None else None
        version = _version(con, tables)
    finally:
        pool.shutdown(wait=True)   # its cursor reads con
        con.close()
    return Extract(report, path, calls, markers, spans, session, version, warnings, links)


def _look_up_held(con) -> None:
    """Launches whose latest-starting range had ended: their holder by the general range join."""
    con.execute("CREATE TEMP TABLE unheld AS SELECT kid, kind FROM innermost WHERE NOT holds")
    con.execute("DELETE FROM innermost WHERE NOT holds")
    con.execute(_RANGE_THREADS)
    # its estimated sides are small, and below merge_join_threshold DuckDB would plan a quadratic
    # piecewise merge join instead of the IEJoin
    con.execute("SET merge_join_threshold = 0")
    con.execute(_LAUNCH_HOLDERS)
    con.execute("INSERT INTO innermost SELECT h.kid, h.kind, h.rid, true FROM held h "
                "JOIN unheld u ON u.kid = h.kid AND u.kind = h.kind")


def _compute_islands(con) -> dict:
    cur = con.cursor()
    try:
        return islands(cur.execute(duck.sql("compute_kernels")).fetchnumpy())
    finally:
        cur.close()


def _version(con, tables) -> str | None:
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables:
            row = con.execute(f"SELECT value FROM r.{t} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
            if row:
                return row[0]
    return None


def _make_views(con, tables: dict[str, set[str]], warnings: list[str]) -> None:
    """Read each source table once into DuckDB (SQLite is scanned once per table: that scan is
    the cost floor); every later step reads these tables, never the report again. They are
    plain tables, not TEMP ones, so that cursors of the connection (busy islands) see them."""
    scans = []
    k = tables.get("CUPTI_ACTIVITY_KIND_KERNEL")
    if k is not None:
        scans.append(f"""CREATE TABLE src_kernels AS
            SELECT start, "end", deviceId, streamId, correlationId, {_col(k, 'globalPid')}, shortName
            FROM r.CUPTI_ACTIVITY_KIND_KERNEL""")
    else:
        con.execute("""CREATE VIEW src_kernels AS SELECT NULL::BIGINT AS start, NULL::BIGINT AS "end",
            NULL::BIGINT AS deviceId, NULL::BIGINT AS streamId, NULL::BIGINT AS correlationId,
            NULL::BIGINT AS globalPid, NULL::BIGINT AS shortName WHERE false""")
    rt = tables.get("CUPTI_ACTIVITY_KIND_RUNTIME")
    if rt is not None:
        scans.append("""CREATE TABLE src_runtime AS
            SELECT start, "end", globalTid, correlationId FROM r.CUPTI_ACTIVITY_KIND_RUNTIME
            WHERE start IS NOT NULL AND globalTid IS NOT NULL""")
    else:
        con.execute("""CREATE VIEW src_runtime AS SELECT NULL::BIGINT AS start, NULL::BIGINT AS "end",
            NULL::BIGINT AS globalTid, NULL::BIGINT AS correlationId WHERE false""")
    nv = tables.get("NVTX_EVENTS")
    if nv is not None:
        like_text = " OR ".join(f"e.text LIKE '{p}'" for p in _RANGE_PATTERNS)
        like_str = " OR ".join(f"value LIKE '{p}'" for p in _RANGE_PATTERNS)
        text_id = "e.textId" if "textId" in nv else "NULL"
        # Registered strings (textId) are resolved only for the few names that can matter; every
        # other range keeps only its times (for the process's elapsed time), not its text
        con.execute(f"CREATE TABLE rel_strings AS SELECT id, value FROM r.StringIds WHERE {like_str}")
        scans.append(f"""CREATE TABLE src_nvtx AS
            SELECT e.start, coalesce(e."end", e.start) AS "end", e.globalTid, e.eventType,
                   CASE WHEN s.id IS NOT NULL THEN s.value WHEN {like_text} THEN e.text END AS name
            FROM r.NVTX_EVENTS e LEFT JOIN rel_strings s ON s.id = {text_id}
            WHERE e.eventType IN (34, 59, 60)""")
    # One table after the other, each scan on every core (the SQLite scanner splits a table by
    # rowid); insertion order is not kept: with it, copying the rows cost twice as much
    con.execute("SET preserve_insertion_order = false")
    for q in scans:
        con.execute(q)
    con.execute("SET preserve_insertion_order = true")
    if nv is not None:
        con.execute("CREATE TEMP TABLE src_ranges AS SELECT start, \"end\", globalTid, name, eventType "
                    "FROM src_nvtx WHERE name IS NOT NULL")
        # a range without a start or a thread cannot be placed: say so instead of guessing
        bad = con.execute("SELECT count(*) FROM src_ranges WHERE start IS NULL OR globalTid IS NULL").fetchone()[0]
        if bad:
            con.execute("DELETE FROM src_ranges WHERE start IS NULL OR globalTid IS NULL")
            warnings.append(f"{bad} NVTX range(s) without a start time or thread ignored (damaged export?)")
    else:
        con.execute("""CREATE TEMP VIEW src_ranges AS SELECT NULL::BIGINT AS start, NULL::BIGINT AS "end",
            NULL::BIGINT AS globalTid, NULL::VARCHAR AS name, NULL::BIGINT AS eventType WHERE false""")
    # every event of a process, for its elapsed time (mpitrace's "elapsed")
    parts = []
    if nv is not None:
        parts.append('SELECT (globalTid >> 24) & 16777215 AS pid, start, "end" FROM src_nvtx '
                     'WHERE globalTid IS NOT NULL')
    if rt is not None:
        parts.append('SELECT (globalTid >> 24) & 16777215 AS pid, start, "end" FROM src_runtime')
    if k is not None and "globalPid" in k:
        parts.append('SELECT (globalPid >> 24) & 16777215 AS pid, start, "end" FROM src_kernels')
    if not parts:
        parts.append('SELECT NULL::BIGINT AS pid, NULL::BIGINT AS start, NULL::BIGINT AS "end" WHERE false')
    # UNION ALL BY NAME: the branches present differ from report to report
    con.execute("CREATE TEMP VIEW src_events AS " + " UNION ALL BY NAME ".join(parts))
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"):
        if t not in tables:
            warnings.append(f"table {t} is absent (nothing of that kind was captured)")
