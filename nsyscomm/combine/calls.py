"""The job's calls and the combined tables: every report's calls typed as the normalized table
(nsyscomm.schema; docs/architecture.md, "The collectives table"), held in Arrow or, past a
batch, in the job's database; then the tables sql/collectives.sql builds the job from."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, replace

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm import duck, schema, temp_folders
from nsyscomm.ingest.extract_type import TABLES, Extract, Table
from nsyscomm.ingest.names import canonical_op
from nsyscomm.ingest.narrow import narrow

TIME_COLS = ("cpu_start", "cpu_end", "gpu_start", "gpu_end", "exec_start", "exec_end")
# each call's number in the job, unique: sql/call_spans.sql works out the calls' timing on
# narrow rows (the window functions sort what they carry), and sql/collectives.sql joins it back
# to the calls by it
CALL_ID = "call_id"
# collectives columns computed for the whole job (sql/calls_ranked.sql, call_spans.sql, collectives.sql)
_DERIVED = ("rank", "local_rank", "host", "duration_ns", "queued_ns", "pair", "logical_id", "setup")


# The most calls a job holds in Arrow: past that, JobCalls moves them into the job's database a
# batch at a time, where they spill past its memory limit (a job of a thousand ranks can make
# tens of millions of calls). In Arrow a call takes about 290 bytes (286 measured for the 200k
# calls of the 6M-row benchmark report).
BATCH_CALLS = 1_000_000
ARROW_BYTES_PER_CALL = 300
# From this many calls on, the job's database is a file in a folder of the process's own
# (nsyscomm.temp_folders), not memory: DuckDB compresses a file's tables as it writes them (the
# collectives table about ten times) and can evict their pages, where every byte of an in-memory
# table stays resident. The compression costs time for every row written, and the memory it
# saves is worth that time only once the job's tables are a large share of the process's memory:
# a smaller job keeps its database in memory (docs/performance.md, "Memory", measures both).
FILE_CALLS = 400_000
# The most calls whose collectives rows one statement writes (create_collectives): DuckDB holds
# the rows a statement adds to a table whole and uncompressed until it commits (about 530 bytes
# a call; a database file then compresses them to about 50), so the wide rows of a large job go
# in slices of this many calls, each statement's rows let go of before the next.
JOIN_CALLS = 200_000


class JobCalls:
    """A job's calls, taken from each extract as it arrives (nsyscomm.extract.pool.extract_many's consume).

    While they fit in one batch (BATCH_CALLS, or a quarter of the database's memory limit) they
    stay in Arrow, and sql/collectives.sql reads them there through the typed view: copying them
    into a table first cost more than reading them in place (docs/performance.md). Past a batch, they are appended to the table
    calls_in of the job's database, a batch at a time, and let go of."""

    def __init__(self) -> None:
        self.pids: dict[str, set[int]] = {}  # report -> the processes that made calls
        self._pending: list[tuple[int, str, pa.Table]] = []
        self._rows = 0
        self._ids = 0  # calls numbered so far: the next call's call_id
        self._stored = False
        self._registered = False  # the calls are registered as calls_arrow

    @functools.cached_property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The job's database, with the memory limit in force when it is made: at first use, when
        the process pool's workers have forked (a fork would not take a database's threads along).
        In memory, or a file (FILE_CALLS) once the calls are that many (all of them taken, or
        past a batch) or the memory is limited, where the file's folder can be made."""
        folder = temp_folders.job_folder() if self._ids + self._rows >= FILE_CALLS or duck.limited() else None
        if folder is None:
            return duck.connect()
        try:
            con = duck.connect(folder=folder)
        except BaseException:
            temp_folders.remove_now(folder)
            raise
        temp_folders.remove_with(folder, con)
        return con

    @functools.cached_property
    def batch(self) -> int:
        """The most calls held in Arrow: BATCH_CALLS, or fewer under the database's memory limit."""
        if not duck.limited():
            return BATCH_CALLS
        limit = duck.memory_limit_bytes(self.con)
        return BATCH_CALLS if limit is None else max(1, min(BATCH_CALLS, limit // 4 // ARROW_BYTES_PER_CALL))

    def add(self, i: int, e: Extract) -> Extract:
        """Take the calls of extract e, the i-th report; returns e without them."""
        self.pids[e.report] = {int(p) for p in pc.unique(e.calls["pid"]).drop_null().to_pylist()}
        if len(e.calls):
            # held narrow (a third of the bytes at 800k calls) until the collectives table holds
            # them: the typed view casts each column back to the normalized table's type
            self._pending.append((i, e.report, narrow(e.calls)))
            self._rows += len(e.calls)
            if self._rows >= self.batch:
                self._store()
        return replace(e, calls=e.calls.schema.empty_table())  # not a slice: that would keep the buffers

    def finish(self) -> None:
        """View calls_typed: every call, typed as the normalized table."""
        if self._stored:
            if self._pending:
                self._store()
            self.con.execute("CREATE TEMP VIEW calls_typed AS SELECT * FROM calls_in")
            return
        calls = self._stacked()
        if calls is not None:
            self.con.register("calls_arrow", calls)
            self._registered = True
        select = _typed_select(calls, "calls_arrow")  # names and types from nsyscomm.schema only
        self.con.execute(f"CREATE TEMP VIEW calls_typed AS {select}")

    def release(self) -> None:
        """Let go of the calls once the collectives table holds them: the views over them
        (calls_typed, calls, which combine makes of it, and calls_ranked) and what they read
        (the Arrow table, or calls_in)."""
        self.con.execute("DROP VIEW IF EXISTS calls_ranked")
        self.con.execute("DROP VIEW IF EXISTS calls")
        self.con.execute("DROP VIEW IF EXISTS calls_typed")
        if self._stored:
            self.con.execute("DROP TABLE calls_in")
        elif self._registered:
            self.con.unregister("calls_arrow")
            self._registered = False

    def _store(self) -> None:
        calls = self._stacked()
        if not self._stored:
            select = _typed_select(None, "")
            self.con.execute(f"CREATE TABLE calls_in AS {select}")
            self._stored = True
        self.con.register("calls_batch", calls)
        try:
            select = _typed_select(calls, "calls_batch")
            self.con.execute(f"INSERT INTO calls_in {select}")
        finally:
            self.con.unregister("calls_batch")

    def _stacked(self) -> pa.Table | None:
        """The pending calls, with their report, in one Arrow table, in report order (None: none)."""
        have = sorted(self._pending, key=lambda p: p[0])
        self._pending, self._rows = [], 0
        if not have:
            return None
        t = have[0][2] if len(have) == 1 else _stack_calls([c for _, _, c in have])
        which = np.repeat(np.arange(len(have), dtype=np.int32), [len(c) for _, _, c in have])
        report = pa.DictionaryArray.from_arrays(which, pa.array([r for _, r, _ in have], pa.string()))
        ids = pa.array(np.arange(self._ids, self._ids + len(t), dtype=np.int64))
        self._ids += len(t)
        return fill_op(t.add_column(0, "report", report.cast(pa.string())).append_column(CALL_ID, ids))


def _stack_calls(tables: list[pa.Table]) -> pa.Table:
    """Calls of several reports in one table, by column name; a column one report lacks is NULL
    there. A column the reports type differently (a source that left it all NULL typed it as
    pandas could: a trace's callers as doubles; narrow() made it as narrow as each report's
    values) takes the normalized table's type first."""
    types: dict[str, set] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, set()).add(f.type)
    target = schema.arrow_types()
    mixed = {n for n, ts in types.items() if len(ts) > 1}
    if mixed:
        tables = [t.cast(pa.schema([_common(f, target) if f.name in mixed else f for f in t.schema])) for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def _common(f: pa.Field, target: dict) -> pa.Field:
    """The type a column the reports type differently takes: the normalized table's, else its
    values' own where it is dictionary-encoded (narrow), which concat_tables then promotes."""
    if f.name in target:
        return pa.field(f.name, target[f.name])
    return pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f


def _typed_select(calls: pa.Table | None, name: str) -> str:
    """calls, registered as name, read as the normalized table's columns and types (the ones
    collectives.sql derives excepted), and each call's call_id; a column the sources did not
    give is NULL."""
    have = set(calls.column_names) if calls is not None else set()
    cols = ", ".join(
        f'CAST("{n}" AS {t}) AS "{n}"' if n in have else f'NULL::{t} AS "{n}"'
        for n, t in (*schema.COLLECTIVES, (CALL_ID, "BIGINT"))
        if n not in _DERIVED
    )
    return f"SELECT {cols} FROM {name}" if calls is not None else f"SELECT {cols} WHERE false"


def fill_op(t: pa.Table) -> pa.Table:
    """An op the source left empty comes from the api name (nsyscomm.ingest.names.canonical_op)."""
    if "op" not in t.column_names or not t["op"].null_count:
        return t
    apis = t["api"].cast(pa.large_string())
    known = pc.unique(apis).drop_null()
    by_api = pa.array([canonical_op(a) for a in known.to_pylist()], pa.large_string())
    filled = pc.coalesce(t["op"].cast(pa.large_string()), pc.take(by_api, pc.index_in(apis, value_set=known)))
    return t.set_column(t.column_names.index("op"), "op", filled)


def stack(extracts: Iterable[Extract], attr: str, columns: list[str]) -> pd.DataFrame:
    frames = [
        getattr(e, attr).assign(report=e.report)
        for e in extracts
        if getattr(e, attr, None) is not None and len(getattr(e, attr))
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["report", *columns])


def stack_arrow(extracts: Iterable[Extract], attr: str, columns: list[str]) -> pa.Table:
    """stack() for frames of many rows: an Arrow table whose report column is dictionary-encoded
    (one string per report, not one per row, which pandas would convert row by row on the way to
    DuckDB), and whose text columns stay in Arrow (DuckDB reads pandas' Arrow-backed strings by
    turning them into Python objects first)."""
    tables = []
    for e in extracts:
        df = getattr(e, attr, None)
        if df is None or not len(df):
            continue
        t = pa.Table.from_pandas(df[columns], preserve_index=False)
        report = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(df), dtype=np.int32)), pa.array([e.report]))
        tables.append(t.append_column("report", report))
    if not tables:
        return pa.Table.from_pandas(pd.DataFrame(columns=["report", *columns]), preserve_index=False)
    return pa.concat_tables(tables, promote_options="permissive")


def register(
    con: duckdb.DuckDBPyConnection, name: str, df: pd.DataFrame | pa.Table, select: str
) -> None:  # df: pandas or Arrow
    con.register(f"{name}_df", df)
    con.execute(f"CREATE TABLE {name} AS SELECT {select} FROM {name}_df")  # not TEMP: see Result.prefetch
    con.unregister(f"{name}_df")


def register_soon(con: duckdb.DuckDBPyConnection, name: str, df: pd.DataFrame | pa.Table, select: str) -> Future:
    """register(), on a cursor of its own in a thread of its own: the table is there once the
    returned future is done. For a large table that the next statements do not read: the copy
    runs on one core, and so do they."""
    return duck.on_cursor_soon(con, lambda cur: register(cur, name, df, select), name)


def register_report_tables(
    con: duckdb.DuckDBPyConnection, extracts: list[Extract], tables: Iterable[Table] = TABLES, soon: bool = False
) -> list[Future]:
    """The job's table of each of these per-report tables that has one, every report's rows
    stacked and typed as declared, and for the tables that may be absent, the reports that have
    them; the extracts of the list are replaced by ones without those rows (let_go). soon: each
    copied on a cursor of its own (register_soon); their futures are returned."""
    futures = []
    for t in tables:
        if t.job_table is None:
            continue
        rows: pd.DataFrame | pa.Table = (stack_arrow if t.stacked_in_arrow else stack)(extracts, t.name, t.column_names)
        have = [e.report for e in extracts if getattr(e, t.name, None) is not None]
        let_go(extracts, t)
        if t.op_from_api:
            rows = fill_op(rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows, preserve_index=False))
        if not len(rows):
            create_empty(con, t.job_table, t.job_columns())
        elif soon:
            futures.append(register_soon(con, t.job_table, rows, t.job_select()))
        else:
            register(con, t.job_table, rows, t.job_select())
        if t.reports_table is not None:
            name = t.reports_table
            create_empty(con, name, [("report", "VARCHAR")])
            if have:
                con.execute(f"INSERT INTO {name} SELECT unnest($1::VARCHAR[])", [have])
    return futures


def create_empty(con: duckdb.DuckDBPyConnection, name: str, columns: list[tuple[str, str]]) -> None:
    """The table of these (name, SQL type) columns with no rows, as register() makes it of rows
    that are absent: declared, not copied from an empty frame, whose scan DuckDB sets up as for
    any frame (most of a small report's tables are empty)."""
    cols = ", ".join(f'"{n}" {t}' for n, t in columns)
    con.execute(f"CREATE TABLE {name} ({cols})")  # not TEMP: see Result.prefetch


def let_go(extracts: list[Extract], table: Table) -> None:
    """Replace each extract of the list by one whose table has no rows, once they are stacked for
    the job's database: the extracts' copies of a large job's rows would otherwise stay beside the
    database's for as long as the list does."""
    for i, e in enumerate(extracts):
        rows = getattr(e, table.name, None)
        if rows is not None:
            # not a slice: that would keep the buffers
            empty = rows.schema.empty_table() if isinstance(rows, pa.Table) else rows.iloc[0:0].copy()
            extracts[i] = replace(e, **{table.name: empty})


@dataclass(frozen=True)
class Needs:
    """Which parts of sql/call_spans.sql the job's calls can need: whether any call may lack a
    seq (numbered by order), be a point-to-point call (paired with its message's other side),
    or wait in a CUDA stream's or a gloo group's queue. Each part left out reads no call; all
    True (the default) gives the same table. Counted in the scan that first reads the calls
    (combine), where a condition wider than the part's own is enough: SELECT_NEEDS."""

    unnumbered: bool = True
    messages: bool = True
    stream_queues: bool = True
    group_queues: bool = True


# the columns of a query over the calls (calls_typed or calls) that give Needs, in its order
SELECT_NEEDS = (
    "coalesce(bool_or(seq IS NULL), false), "
    "coalesce(bool_or(op IN ('send', 'recv') AND peer IS NOT NULL), false), "
    "coalesce(bool_or(gpu_start IS NOT NULL), false), "
    "coalesce(bool_or(gpu_start IS NULL AND source = 'wrapper' AND \"group\" IS NOT NULL "
    "AND op NOT IN ('send', 'recv')), false)"
)


def create_collectives(con: duckdb.DuckDBPyConnection, needs: Needs = Needs()) -> None:
    """The table collectives from the view calls: each call's number and span first, on narrow
    rows (call_spans, dropped once joined), then the wide rows with them. Two queries: in one,
    the window functions' working memory stayed taken while the join ran. DuckDB's allocator
    keeps what a query freed (duck.connect), so each query's working memory is handed back after
    it: the join's otherwise came on top of the windows', and the next steps' on top of both.
    needs: the parts of the windows' query the calls need (Needs)."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW calls_ranked AS {duck.sql('calls_ranked')}")
    # DuckDB estimates a registered Arrow table (the calls) at ~1 row, so it would build the hash
    # table of the calls x proc_ranks join on the many calls instead of the few processes, which
    # doubles its cost. Without that optimizer, a LEFT JOIN builds its right side, proc_ranks.
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    restore = _one_thread(con)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE call_spans AS {duck.sql('call_spans')}", asdict(needs))
        hand_back(con)
        _join_spans(con)
    finally:
        con.execute("RESET disabled_optimizers")
        con.execute("DROP TABLE IF EXISTS call_spans")
        if restore:
            con.execute(f"SET threads = {restore}")
    hand_back(con)


def _one_thread(con: duckdb.DuckDBPyConnection) -> int | None:
    """Run the collectives' two queries on one thread where the job's database is a file (a
    large job, or memory limited: JobCalls.con); returns the thread count to restore after
    them, None where it is left as it is. Each thread of the windows and of the join holds its
    own sort and hash buffers of the calls, and there the writing of the file's compressed rows,
    on one thread either way, sets the pace: a second thread added its buffers to the job's peak
    and saved no time. In memory, a second thread makes them faster (docs/performance.md,
    "Memory", measures both)."""
    threads = duck.threads(con)
    if not duck.on_file(con) or threads == 1:
        return None
    con.execute("SET threads = 1")
    return threads


def hand_back(con: duckdb.DuckDBPyConnection) -> None:
    """What DuckDB's allocator kept of the job stage's queries handed back to the system
    (duck.release_duckdb_memory) where the job's database is a file: a large job, or memory
    limited (JobCalls.con). A smaller job's database is in memory, and its next queries would
    take the memory back at once, in page faults, for little."""
    if duck.on_file(con):
        duck.release_duckdb_memory(con)


def _join_spans(con: duckdb.DuckDBPyConnection) -> None:
    """The table collectives: sql/collectives.sql over the calls numbered 0 to JOIN_CALLS, then
    each next slice of JOIN_CALLS numbers appended (the table is stored unsorted either way)."""
    select = duck.sql("collectives")
    ids = duck.scalar(con, "SELECT coalesce(max(call_id) + 1, 0) FROM call_spans")
    con.execute(f"CREATE TABLE collectives AS {select}", {"lo": 0, "hi": JOIN_CALLS})
    for lo in range(JOIN_CALLS, ids, JOIN_CALLS):
        con.execute(f"INSERT INTO collectives {select}", {"lo": lo, "hi": lo + JOIN_CALLS})
