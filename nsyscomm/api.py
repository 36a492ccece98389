"""The library under the CLI: find reports, extract each (map), combine into one job (reduce),
run the analyses in sql/. Every CLI command is a call into here."""

from __future__ import annotations

import functools
import glob
import os
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm import duck, ops, schema
from nsyscomm.errors import InputError
from nsyscomm.ingest import gpu_metrics, kineto, nsys_sqlite, nsys_tables, straggler_trace
from nsyscomm.ingest.names import canonical_op
from nsyscomm.overlap import parts as overlap_parts

SCHEMA_VERSION = 1  # of the JSON output contract (DESIGN.md)


def sample_reports_dir() -> Path:
    try:
        return Path(str(resources.files("nsyscomm.sample_reports")))
    except ModuleNotFoundError:  # source checkout, not installed
        return Path(__file__).resolve().parent.parent / "sample_reports"


def sample_jobs() -> list[Path]:
    """The bundled synthetic samples, one job each: a report file or a folder of per-node reports."""
    d = sample_reports_dir()
    return sorted([p for p in d.glob("*.sqlite")] + [p for p in d.iterdir() if p.is_dir() and any(p.glob("*.sqlite"))])


def discover(paths) -> list[Path]:
    """Files, folders (searched recursively) and globs -> the report files, sorted."""
    if paths is None or (not isinstance(paths, (str, os.PathLike)) and len(paths) == 0):
        paths = [sample_reports_dir()]
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            hits = sorted(x for x in p.rglob("*.sqlite") if x.is_file())
            if not hits:  # per-op traces of the OSDI'25 what-if artifact (trace-*.parquet + meta-*.yaml)
                hits = sorted(x for x in p.rglob("trace-*.parquet") if straggler_trace.is_trace(x))
            if not hits:  # PyTorch profiler traces, one per rank (nsyscomm.ingest.kineto)
                hits = sorted(x for x in p.rglob("*") if x.is_file() and kineto.is_trace(x))
            if not hits:  # PyTorch Flight Recorder dumps, one per rank (issue 22)
                from nsyscomm.ingest import flight_recorder
                hits = flight_recorder.dumps_in(p)
            if not hits:
                reps = sorted(p.rglob("*.nsys-rep"))
                hint = (f"export them first: nsys export --type sqlite {reps[0]}" if reps
                        else "point to a folder of nsys SQLite exports (*.sqlite)")
                raise InputError(f"{p}: no report (*.sqlite, or PyTorch profiler *.json/*.json.gz) "
                                 f"in this folder; {hint}")
            found.extend(hits)
        elif p.is_file():
            found.append(p)
        elif any(ch in str(p) for ch in "*?["):
            hits = sorted(Path(x) for x in glob.glob(str(p), recursive=True) if Path(x).is_file())
            if not hits:
                raise InputError(f"{p}: the pattern matches no file; check the path")
            found.extend(hits)
        else:
            raise InputError(f"{p}: no such file or folder; check the path")
    out, seen = [], set()
    for f in found:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            out.append(f)
    return out


def extract_one(path: Path, report: str | None = None, threads: int | None = None) -> nsys_sqlite.Extract:
    """One source's extract, its names bounded and its values checked (ingest.limits, issue 26)."""
    from nsyscomm.ingest import limits

    return limits.checked(_extract_source(path, report, threads), path)


def _extract_source(path: Path, report: str | None, threads: int | None) -> nsys_sqlite.Extract:
    if path.suffix == ".nsys-rep":
        raise InputError(f"{path}: an .nsys-rep is not read directly; "
                         f"export it first: nsys export --type sqlite --output {path.with_suffix('.sqlite')} {path}")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty; profile again or export again with nsys export --type sqlite")
    if straggler_trace.is_trace(path):
        return straggler_trace.extract(path, report)
    if nsys_tables.is_sqlite(path):
        try:
            return nsys_sqlite.extract(path, report, threads)
        except (duckdb.Error, sqlite3.Error) as e:
            if isinstance(e, duckdb.OutOfMemoryException) or duck.interrupted(e):
                raise  # not the report's fault: memory ran out (the CLI says to raise the limit), or Ctrl-C
            # a damaged or truncated database: name it and say what to do, no traceback
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(f"{path}: cannot read this SQLite export ({first}); "
                             f"export the report again with: nsys export --type sqlite REPORT.nsys-rep") from None
    if kineto.is_trace(path):
        return kineto.extract(path, report)
    from nsyscomm.ingest import flight_recorder  # issue 22: a Flight Recorder dump (restricted unpickler)
    if flight_recorder.is_dump(path):
        return flight_recorder.extract(path, report)
    raise InputError(f"{path}: not an nsys SQLite export; make one with: nsys export --type sqlite REPORT.nsys-rep")


def _report_names(paths: list[Path]) -> list[str]:
    """Short, unique names for reports: the file name, or the path below the common folder."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
    return [str(p.resolve().relative_to(common)) for p in paths]


# the collectives table in each rank's time order (it is stored unsorted)
ORDERED = "SELECT * FROM collectives ORDER BY rank, coalesce(gpu_start, cpu_start), cpu_start, pid, tid, seq"


@dataclass
class Result:
    """A job's collectives and the analyses over them."""

    con: duckdb.DuckDBPyConnection
    reports: list[str]
    warnings: list[str] = field(default_factory=list)
    by_caller: bool = False
    nccl_logs: list = field(default_factory=list)          # nsyscomm.ingest.nccl_log.NcclLog, from --nccl-log
    reference: pd.DataFrame | None = None                  # nccl-tests busbw curve from those logs
    overlap_parts: Future | None = None                    # of overlap_parts(): begun by combine()
    _prefetched: dict = field(default_factory=dict, init=False, repr=False)   # (name, params) -> Future
    op_trace: tuple | None = None                          # (ops, meta) of a per-op what-if trace input
    sources: list = field(default_factory=list)             # the input files (issue 22: records beside them)

    @functools.cached_property
    def hang(self) -> dict:
        """Hang/desync diagnosis (nsyscomm.analyses.hang): status, blocked, mismatches."""
        from nsyscomm.analyses import hang
        return hang.diagnose(self.con, self.sources)

    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        return self.con.sql(ORDERED)

    @property
    def collectives(self) -> pd.DataFrame:
        return duck.frame(self.con.execute(ORDERED))

    def prefetch(self, *queries: tuple[str, dict]) -> None:
        """Begin the analyses (name, parameters) a view is about to ask for, two at a time, each
        on a cursor of its own: one after the other, each of these short queries left a core
        idle for part of its time (the JSON's, for 200k calls: 0.10-0.12 s -> 0.08-0.10 s)."""
        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nsyscomm-query")

        def run(name: str, params: dict):
            cur = duck.quiet(self.con.cursor())
            try:
                return cur.execute(duck.sql(name), params or None).to_arrow_table()
            finally:
                cur.close()

        for name, params in queries:
            key = _query_key(name, params)
            if key not in self._prefetched:
                self._prefetched[key] = pool.submit(run, name, params)
        pool.shutdown(wait=False)

    def _query(self, name: str, **params) -> pd.DataFrame:
        ahead = self._prefetched.get(_query_key(name, params))
        if ahead is not None:
            return duck.arrow_frame(ahead.result())
        return duck.frame(self.con.execute(duck.sql(name), params or None))

    @property
    def summary(self) -> pd.DataFrame:
        return self.summarize(by_caller=self.by_caller)

    def summarize(self, by_caller: bool = False) -> pd.DataFrame:
        return self._query("summary", by_caller=by_caller)

    @property
    def ranks(self) -> pd.DataFrame:
        return self._query("ranks")

    @property
    def skew_ranks(self) -> pd.DataFrame:
        return self._query("skew")

    @property
    def skew(self) -> dict:
        per = self.skew_ranks
        instances = int(self.con.execute(
            "SELECT count(*) FROM logical_collectives WHERE participants >= 2").fetchone()[0])
        straggler = None
        if instances and len(per) and per["late_count"].max() > 0:
            top = per.sort_values(["late_count", "rank"], ascending=[False, True]).iloc[0]
            straggler = int(top["rank"])
        return {
            "straggler_rank": straggler,
            "instances": instances,
            "per_rank": [
                {"rank": int(r.rank), "late_count": int(r.late_count),
                 "avg_arrival_delay_ms": float(r.avg_arrival_delay_ms), "wait_ms": float(r.wait_ms)}
                for r in per.itertuples()
            ],
        }

    @property
    def overlap(self) -> pd.DataFrame:
        """Exposed communication per rank (step NaN) and per rank and step: ns of NCCL kernel time
        that no compute kernel on the same device hides. Empty for CPU-only jobs."""
        if self.overlap_parts is None:
            self.overlap_parts = _begin_overlap(self.con)
        self.con.register("overlap_parts", self.overlap_parts.result())
        try:
            df = self._query("overlap")
        finally:
            self.con.unregister("overlap_parts")
        df["exposed_pct"] = (100.0 * df["exposed_ns"] / df["comm_busy_ns"]).where(df["comm_busy_ns"] > 0)
        return df

    @property
    def steps(self) -> pd.DataFrame:
        return self._query("steps")

    @property
    def size_histogram(self) -> pd.DataFrame:
        return self._query("size_histogram")

    @property
    def unmatched(self) -> pd.DataFrame:
        return self._query("unmatched")

    def top_skew(self, limit: int = 10) -> pd.DataFrame:
        return self._query("top_skew", limit=limit)

    def vs_reference(self, by_caller: bool = False) -> pd.DataFrame:
        """Summary rows beside the nccl-tests reference busbw at the same size (empty without a curve)."""
        if self.reference is None or self.reference.empty:
            return pd.DataFrame()
        from nsyscomm.ingest.nccl_log import compare

        out = compare(self.summarize(by_caller=by_caller), self.reference)
        return out[out["ref_busbw_GBps"].notna()]

    @property
    def link_metrics(self) -> pd.DataFrame:
        """NVLink / PCIe / C2C counters during collectives, per op, size and nsys metric (reports
        captured with --gpu-metrics-devices; empty otherwise)."""
        return self._query("link_metrics")

    # --- what-if replay (nsyscomm.analyses.whatif; issue 23) ---
    @functools.cached_property
    def what_if_analysis(self) -> dict:
        """what_if rows, attribution rows and the model's notes (computed once)."""
        from nsyscomm.analyses import whatif

        return whatif.of_result(self)

    @property
    def what_if(self) -> list[dict]:
        """Scenarios ranked by ms saved: {scenario, saved_ms, step_ms_before, step_ms_after, slowdown, ...}."""
        return self.what_if_analysis["what_if"]

    @property
    def attribution(self) -> list[dict]:
        """{by, key, slowdown}: the slowdown each rank / op (/ dp_rank, stage, optype) causes."""
        return self.what_if_analysis["attribution"]

    @property
    def n_calls(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM collectives").fetchone()[0])


def _query_key(name: str, params: dict) -> tuple:
    return name, tuple(sorted(params.items()))


def load(paths=None, *, by_caller: bool = False, nccl_logs=(), jobs: int | None = None, cache: bool = True,
         dask: str | None = None, memory_limit: str | None = None) -> Result:
    """Reports -> one job's Result. nccl_logs: NCCL_DEBUG=INFO / nccl-tests outputs giving the
    job's NCCL context and a reference bandwidth curve. memory_limit: DuckDB's memory per process
    ("4GB", "50%"; else NSYSCOMM_MEMORY_LIMIT, else DuckDB's default); past it, it spills to disk."""
    files = discover(paths)
    names = _report_names(files)
    from nsyscomm import scale  # jobs/cache/dask: parallel extraction, Parquet cache, Dask cluster

    with duck.memory_limit(memory_limit):
        calls = JobCalls()
        extracts = scale.extract_many(files, names, jobs=jobs, cache=cache, dask=dask, consume=calls.add)
        result = combine(extracts, by_caller=by_caller, calls=calls)
    result.sources = list(files)
    if nccl_logs:
        from nsyscomm.ingest import nccl_log

        result.nccl_logs = [nccl_log.parse(p) for p in nccl_logs]
        curves = [c for c in (nccl_log.reference_curve(p) for p in nccl_logs) if len(c)]
        result.reference = pd.concat(curves, ignore_index=True) if curves else None
        result.warnings += [w for log in result.nccl_logs for w in log.warnings]
    result.op_trace = straggler_trace.job_trace(files)   # compute ops too, for the what-if replay
    return result


def _assign_ranks(extracts, called_pids: dict[str, set[int]]) -> tuple[pd.DataFrame, list[str]]:
    """(report, pid) -> rank: the wrapper's marker, else process order across the job.
    called_pids: per report, the processes that made calls (JobCalls.pids)."""
    warnings: list[str] = []
    rows, unmarked = [], []
    for e in extracts:
        marked = {}
        m = e.markers   # columns, not itertuples(): 256 small reports took 0.3 s
        for pid, rank, local_rank, host in zip(m["pid"].tolist(), m["rank"].tolist(), m["local_rank"].tolist(),
                                               m["host"].tolist()):
            if pd.notna(rank):
                marked[int(pid)] = (int(rank), None if pd.isna(local_rank) else int(local_rank), host)
        called = called_pids.get(e.report, set())
        pids = sorted(called | set(marked))
        for pid in pids:
            if pid in marked:
                rows.append((e.report, pid, *marked[pid]))
            elif pid in called:
                unmarked.append((e.report, pid, None, None))
    # a rank claimed twice (two jobs' reports mixed, a restarted process) would merge two processes'
    # calls into one rank: the first claimant keeps it, the others get free numbers, loudly
    seen: set[int] = set()
    kept, clashes = [], []
    for r in rows:
        (clashes if r[2] in seen else kept).append(r)
        seen.add(r[2])
    if clashes:
        who = ", ".join(f"{r[0]}:{r[1]}" for r in clashes)
        warnings.append(f"rank(s) {sorted({r[2] for r in clashes})} claimed by several processes; "
                        f"renumbered: {who} (are these reports from one job?)")
        # a renumbered process keeps its host and local rank: only its rank clashed (issue 26)
        unmarked += [(r[0], r[1], r[3], r[4]) for r in clashes]
        rows = kept
    taken = {r[2] for r in rows}
    if unmarked:
        nxt = 0
        for report, pid, local_rank, host in unmarked:  # already in (report order, pid) order
            while nxt in taken:
                nxt += 1
            rows.append((report, pid, nxt, local_rank, host))
            taken.add(nxt)
        if len(unmarked) > len(clashes):
            warnings.append(f"{len(unmarked) - len(clashes)} process(es) carry no nsyscomm rank marker: "
                            f"ranks assigned in process order (report, pid)")
    return pd.DataFrame(rows, columns=["report", "pid", "rank", "local_rank", "host"]), warnings


_TIME_COLS = ("cpu_start", "cpu_end", "gpu_start", "gpu_end")
# collectives columns computed for the whole job in sql/collectives.sql
_DERIVED = ("rank", "local_rank", "host", "duration_ns", "pair", "logical_id")


def _session_offsets(extracts) -> dict[str, int]:
    """First step of clock alignment: place each report on the wall clock by its session start."""
    starts = {e.report: e.session_start_utc_ns for e in extracts}
    if len(extracts) < 2 or None in starts.values() or len(set(starts.values())) == 1:
        return {e.report: 0 for e in extracts}
    ref = min(starts.values())
    return {r: v - ref for r, v in starts.items()}


def combine(extracts, by_caller: bool = False, calls: JobCalls | None = None) -> Result:
    """The extracts of a job's reports -> its Result. calls: their calls, gathered as they
    arrived (load() does that); by default taken from the extracts."""
    if calls is None:
        calls = JobCalls()
        for i, e in enumerate(extracts):
            calls.add(i, e)
    con = calls.con
    warnings = [w for e in extracts for w in e.warnings]
    offsets = _session_offsets(extracts)
    shifted = any(offsets.values())
    proc_ranks, rank_warnings = _assign_ranks(extracts, calls.pids)
    warnings += rank_warnings
    calls.finish()   # view calls_typed
    # absurd timestamps (end before start) would give negative latencies: leave those calls out
    skipped, backwards = con.execute(
        "SELECT count(*) FILTER (WHERE op IS NULL), "
        "count(*) FILTER (WHERE cpu_end < cpu_start OR gpu_end < gpu_start) FROM calls_typed").fetchone()
    if skipped:
        warnings.append(f"{skipped} call(s) of unknown operation skipped")
    if backwards:
        warnings.append(f"{backwards} call(s) end before they start (corrupt timestamps): left out")
    where = "op IS NOT NULL AND (cpu_end < cpu_start OR gpu_end < gpu_start) IS NOT TRUE"
    if shifted:
        # each report's clock offset (_shift) applies to its calls as they are read
        con.execute("CREATE TEMP TABLE report_offsets (report VARCHAR, off BIGINT)")
        con.executemany("INSERT INTO report_offsets VALUES (?, 0)", [[e.report] for e in extracts])
        sets = ", ".join(f"c.{t} + o.off AS {t}" for t in _TIME_COLS)
        con.execute(f"CREATE TEMP VIEW calls AS SELECT c.* REPLACE ({sets}) FROM calls_typed c "
                    f"JOIN report_offsets o ON o.report = c.report WHERE {where}")
    else:
        con.execute(f"CREATE TEMP VIEW calls AS SELECT * FROM calls_typed WHERE {where}")
    _register(con, "proc_ranks", proc_ranks,
              "report::VARCHAR AS report, pid::BIGINT AS pid, rank::INTEGER AS rank, "
              "local_rank::INTEGER AS local_rank, host::VARCHAR AS host")
    _register(con, "proc_spans", _stack(extracts, "spans", ["pid", "first_ns", "last_ns"]),
              "report::VARCHAR AS report, pid::BIGINT AS pid, first_ns::BIGINT AS first_ns, last_ns::BIGINT AS last_ns")
    links = _fill_op(pa.Table.from_pandas(_stack(extracts, "links", gpu_metrics.COLUMNS), preserve_index=False))
    _register(con, "link_usage", links,
              "report::VARCHAR AS report, device::INTEGER AS device, op::VARCHAR AS op, bytes::BIGINT AS bytes, "
              "metric::VARCHAR AS metric, calls::BIGINT AS calls, covered_ns::DOUBLE AS covered_ns, "
              "weighted::DOUBLE AS weighted, max_value::DOUBLE AS max_value")
    if shifted:
        _shift(con, offsets)
    _create_collectives(con)
    if shifted:
        warnings += _refine_clocks(con, extracts[0].report)
    # each call's part of exposed communication (numpy, one core) is made meanwhile: the steps
    # below and the first views are DuckDB queries on one core too
    parts = _begin_overlap(con)
    # plain tables, not TEMP ones, from here on: the views' queries run on cursors too (Result.prefetch)
    con.execute("""CREATE TABLE rank_spans AS
        SELECT m.rank, min(m.host) AS host, min(s.first_ns) AS first_ns, max(s.last_ns) AS last_ns
        FROM proc_ranks m JOIN proc_spans s ON s.report = m.report AND s.pid = m.pid GROUP BY m.rank""")
    con.execute(f"CREATE TABLE logical_collectives AS {duck.sql('logical_collectives')}")
    # what the warnings below count, in one scan of the calls
    max_n, by_order, unsized = con.execute(
        "SELECT coalesce(max(group_size), 1), "
        "count(*) FILTER (WHERE source NOT IN ('wrapper', 'nccl_payload', 'whatif_trace')), "
        "count(*) FILTER (WHERE bytes IS NULL AND op <> 'barrier') FROM collectives").fetchone()
    max_n = int(max_n)
    factors = pd.DataFrame([(op, n, ops.busbw_factor(op, n)) for op in ops.OPS for n in range(1, max(2, max_n) + 1)],
                           columns=["op", "group_size", "factor"])
    _register(con, "busbw_factors", factors, "op, group_size::INTEGER AS group_size, factor::DOUBLE AS factor")
    # point-to-point calls have one participant per side by nature
    unmatched = con.execute("SELECT count(*) FROM logical_collectives "
                            "WHERE participants < group_size AND op NOT IN ('send', 'recv')").fetchone()[0]
    if unmatched:
        warnings.append(f"{unmatched} logical collective(s) were seen on fewer ranks than their group size "
                        f"(ranks missing from the input, or calls outside the capture window)")
    if by_order:
        warnings.append(f"{by_order} call(s) without nsyscomm or NCCL payload metadata: matched across ranks by "
                        f"call order, group size inferred from the matched ranks")
    if unsized:
        warnings.append(f"{unsized} call(s) of unknown message size: no bandwidth for them")
    return Result(con, [e.report for e in extracts], warnings, by_caller, overlap_parts=parts)


def _begin_overlap(con) -> Future:
    """overlap_parts() of the job's final `collectives`, on a thread of its own (with a cursor
    of its own: a DuckDB connection serves one thread at a time)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsyscomm-overlap")
    cur = duck.quiet(con.cursor())

    def run():
        try:
            return overlap_parts(cur)
        finally:
            cur.close()

    try:
        return pool.submit(run)
    finally:
        pool.shutdown(wait=False)


# The most calls a job holds in Arrow: past that, JobCalls moves them into the job's database a
# batch at a time, where they spill past its memory limit (a job of a thousand ranks can make
# tens of millions of calls). In Arrow a call takes about 290 bytes (286 measured for the 200k
# calls of the 6M-row benchmark report).
BATCH_CALLS = 1_000_000
ARROW_BYTES_PER_CALL = 300


class JobCalls:
    """A job's calls, taken from each extract as it arrives (scale.extract_many's consume).

    While they fit in one batch (BATCH_CALLS, or a quarter of the database's memory limit) they
    stay in Arrow, and sql/collectives.sql reads them there through the typed view: copying them
    into a table first cost 0.12 s for 200k calls. Past a batch, they are appended to the table
    calls_in of the job's database, a batch at a time, and let go of."""

    def __init__(self):
        self.pids: dict[str, set[int]] = {}   # report -> the processes that made calls
        self._pending: list[tuple[int, str, pa.Table]] = []
        self._rows = 0
        self._stored = False

    @functools.cached_property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The job's database, with the memory limit in force when it is made: at first use, when
        the process pool's workers have forked (a fork would not take a database's threads along)."""
        return duck.connect()

    @functools.cached_property
    def batch(self) -> int:
        """The most calls held in Arrow: BATCH_CALLS, or fewer under the database's memory limit."""
        limit = duck.memory_limit_bytes(self.con)
        return BATCH_CALLS if limit is None else max(1, min(BATCH_CALLS, limit // 4 // ARROW_BYTES_PER_CALL))

    def add(self, i: int, e: nsys_sqlite.Extract) -> nsys_sqlite.Extract:
        """Take the calls of extract e, the i-th report; returns e without them."""
        self.pids[e.report] = {int(p) for p in pc.unique(e.calls["pid"]).drop_null().to_pylist()}
        if len(e.calls):
            self._pending.append((i, e.report, e.calls))
            self._rows += len(e.calls)
            if self._rows >= self.batch:
                self._store()
        return replace(e, calls=e.calls.schema.empty_table())   # not a slice: that would keep the buffers

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
        select = _typed_select(calls, "calls_arrow")   # names and types from nsyscomm.schema only
        self.con.execute(f"CREATE TEMP VIEW calls_typed AS {select}")

    def _store(self) -> None:
        calls = self._stacked()
        if not self._stored:
            select = _typed_select(None, "")
            self.con.execute(f"CREATE TEMP TABLE calls_in AS {select}")
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
        return _fill_op(t.add_column(0, "report", report.cast(pa.string())))


def _stack_calls(tables: list[pa.Table]) -> pa.Table:
    """Calls of several reports in one table, by column name; a column one report lacks is NULL
    there. A column the reports type differently (a source that left it all NULL typed it as
    pandas could: a trace's callers as doubles) takes the normalized table's type first."""
    types: dict[str, set] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, set()).add(f.type)
    target = schema.arrow_types()
    mixed = {n for n, ts in types.items() if len(ts) > 1 and n in target}
    if mixed:
        tables = [t.cast(pa.schema([pa.field(f.name, target[f.name]) if f.name in mixed else f for f in t.schema]))
                  for t in tables]
    return pa.concat_tables(tables, promote_options="permissive")


def _typed_select(calls: pa.Table | None, name: str) -> str:
    """calls, registered as name, read as the normalized table's columns and types (the ones
    collectives.sql derives excepted); a column the sources did not give is NULL."""
    have = set(calls.column_names) if calls is not None else set()
    cols = ", ".join(f'CAST("{n}" AS {t}) AS "{n}"' if n in have else f'NULL::{t} AS "{n}"'
                     for n, t in schema.COLLECTIVES if n not in _DERIVED)
    return f"SELECT {cols} FROM {name}" if calls is not None else f"SELECT {cols} WHERE false"


def _fill_op(t: pa.Table) -> pa.Table:
    """An op the source left empty comes from the api name (nsyscomm.ingest.names.canonical_op)."""
    if "op" not in t.column_names or not t["op"].null_count:
        return t
    apis = t["api"].cast(pa.large_string())
    known = pc.unique(apis).drop_null()
    by_api = pa.array([canonical_op(a) for a in known.to_pylist()], pa.large_string())
    filled = pc.coalesce(t["op"].cast(pa.large_string()), pc.take(by_api, pc.index_in(apis, value_set=known)))
    return t.set_column(t.column_names.index("op"), "op", filled)


def _stack(extracts, attr: str, columns: list[str]) -> pd.DataFrame:
    frames = [getattr(e, attr).assign(report=e.report) for e in extracts
              if getattr(e, attr, None) is not None and len(getattr(e, attr))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["report", *columns])


def _register(con, name: str, df, select: str) -> None:  # df: pandas or Arrow
    con.register(f"{name}_df", df)
    con.execute(f"CREATE TABLE {name} AS SELECT {select} FROM {name}_df")   # not TEMP: see Result.prefetch
    con.unregister(f"{name}_df")


def _shift(con, offsets: dict[str, int]) -> None:
    """Move every timestamp of a report by its offset (ns)."""
    for report, off in offsets.items():
        if not off:
            continue
        con.execute("UPDATE report_offsets SET off = off + $off WHERE report = $r", {"off": off, "r": report})
        con.execute("UPDATE proc_spans SET first_ns = first_ns + $off, last_ns = last_ns + $off WHERE report = $r",
                    {"off": off, "r": report})


def _refine_clocks(con, ref: str) -> list[str]:
    """Second step: a collective ends at nearly the same moment on all its ranks, so the median
    difference of matched end times between a report and the reference is its clock error."""
    deltas = con.execute(duck.sql("clock_offsets"), {"ref": ref}).fetchall()
    if not deltas:
        return ["reports come from several nsys sessions and share no collective: "
                "clocks aligned by session start only"]
    _shift(con, {report: int(delta) for report, delta, _, _ in deltas})
    con.execute("DROP TABLE collectives")
    _create_collectives(con)
    worst = max(res for _, _, res, _ in deltas)
    return [f"clocks of {len(deltas) + 1} reports aligned by session start and collective end times "
            f"(residual error up to {worst / 1e3:.1f} us, median absolute deviation of matched ends)"]


def _create_collectives(con) -> None:
    # DuckDB estimates a registered Arrow table (the calls) at ~1 row, so it would build the hash
    # table of the calls x proc_ranks join on the 200k calls instead of the few processes: 0.30 s
    # instead of 0.16 s. Without that optimizer, a LEFT JOIN builds its right side, proc_ranks.
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    try:
        con.execute(f"CREATE TABLE collectives AS {duck.sql('collectives')}")
    finally:
        con.execute("RESET disabled_optimizers")
