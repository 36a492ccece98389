"""The library under the CLI: find reports, extract each (map), combine into one job (reduce),
run the analyses in sql/. Every CLI command is a call into here."""

from __future__ import annotations

import glob
import os
import sqlite3
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import duckdb
import pandas as pd

from nsyscomm import duck, ops, schema
from nsyscomm.errors import InputError
from nsyscomm.ingest import kineto, nsys_sqlite
from nsyscomm.ingest.names import canonical_op

SCHEMA_VERSION = 1  # of the JSON output contract (DESIGN.md)


def sample_reports_dir() -> Path:
    try:
        return Path(str(resources.files("nsyscomm.sample_reports")))
    except ModuleNotFoundError:  # source checkout, not installed
        return Path(__file__).resolve().parent.parent / "sample_reports"


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
            if not hits:  # PyTorch profiler traces, one per rank (nsyscomm.ingest.kineto)
                hits = sorted(x for x in p.rglob("*") if x.is_file() and kineto.is_trace(x))
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


def extract_one(path: Path, report: str | None = None) -> nsys_sqlite.Extract:
    if path.suffix == ".nsys-rep":
        raise InputError(f"{path}: an .nsys-rep is not read directly; "
                         f"export it first: nsys export --type sqlite --output {path.with_suffix('.sqlite')} {path}")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty; profile again or export again with nsys export --type sqlite")
    if nsys_sqlite.is_sqlite(path):
        try:
            return nsys_sqlite.extract(path, report)
        except (duckdb.Error, sqlite3.Error) as e:
            # a damaged or truncated database: name it and say what to do, no traceback
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(f"{path}: cannot read this SQLite export ({first}); "
                             f"export the report again with: nsys export --type sqlite REPORT.nsys-rep") from None
    if kineto.is_trace(path):
        return kineto.extract(path, report)
    raise InputError(f"{path}: not an nsys SQLite export; make one with: nsys export --type sqlite REPORT.nsys-rep")


def _report_names(paths: list[Path]) -> list[str]:
    """Short, unique names for reports: the file name, or the path below the common folder."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
    return [str(p.resolve().relative_to(common)) for p in paths]


@dataclass
class Result:
    """A job's collectives and the analyses over them."""

    con: duckdb.DuckDBPyConnection
    reports: list[str]
    warnings: list[str] = field(default_factory=list)
    by_caller: bool = False

    @property
    def relation(self) -> duckdb.DuckDBPyRelation:
        return self.con.table("collectives")

    @property
    def collectives(self) -> pd.DataFrame:
        return self.con.execute("SELECT * FROM collectives").df()

    def _query(self, name: str, **params) -> pd.DataFrame:
        return self.con.execute(duck.sql(name), params or None).df()

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
    def n_calls(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM collectives").fetchone()[0])


def load(paths=None, *, by_caller: bool = False) -> Result:
    files = discover(paths)
    names = _report_names(files)
    extracts = [extract_one(f, n) for f, n in zip(files, names)]
    return combine(extracts, by_caller=by_caller)


def _assign_ranks(extracts) -> tuple[pd.DataFrame, list[str]]:
    """(report, pid) -> rank: the wrapper's marker, else process order across the job."""
    warnings: list[str] = []
    rows, unmarked = [], []
    for e in extracts:
        marked = {}
        for m in e.markers.itertuples():
            if pd.notna(m.rank):
                marked[int(m.pid)] = (int(m.rank), None if pd.isna(m.local_rank) else int(m.local_rank), m.host)
        pids = sorted(set(int(p) for p in e.calls["pid"].dropna()) | set(marked))
        for pid in pids:
            if pid in marked:
                rows.append((e.report, pid, *marked[pid]))
            elif pid in set(e.calls["pid"].dropna().astype(int)):
                unmarked.append((e.report, pid))
    taken = {r[2] for r in rows}
    if unmarked:
        nxt = 0
        for report, pid in unmarked:  # already in (report order, pid) order
            while nxt in taken:
                nxt += 1
            rows.append((report, pid, nxt, None, None))
            taken.add(nxt)
        warnings.append(f"{len(unmarked)} process(es) carry no nsyscomm rank marker: "
                        f"ranks assigned in process order (report, pid)")
    df = pd.DataFrame(rows, columns=["report", "pid", "rank", "local_rank", "host"])
    dup = df[df.duplicated("rank", keep=False)]
    if len(dup):
        warnings.append(f"rank(s) {sorted(set(dup['rank']))} claimed by several processes: "
                        f"{', '.join(f'{r.report}:{r.pid}' for r in dup.itertuples())}")
    return df, warnings


def combine(extracts, by_caller: bool = False) -> Result:
    warnings = [w for e in extracts for w in e.warnings]
    frames = []
    for e in extracts:
        if len(e.calls):
            c = e.calls.copy()
            c.insert(0, "report", e.report)
            frames.append(c)
    calls = pd.concat(frames, ignore_index=True) if frames else None
    proc_ranks, rank_warnings = _assign_ranks(extracts)
    warnings += rank_warnings
    con = duck.connect()
    # typed and empty first, so a job with no collectives still runs every analysis
    con.execute(f"CREATE TEMP TABLE calls_raw AS SELECT * EXCLUDE (rank, local_rank, host, duration_ns) "
                f"FROM ({_empty_select()})")
    if calls is not None:
        ops_map = {a: canonical_op(a) for a in calls["api"].dropna().unique()}
        from_api = calls["api"].map(ops_map)
        calls["op"] = calls["op"].where(calls["op"].notna(), from_api)
        con.register("calls_df", calls)
        con.execute("INSERT INTO calls_raw BY NAME SELECT * FROM calls_df")
    con.execute("CREATE TEMP VIEW calls AS SELECT * FROM calls_raw WHERE op IS NOT NULL")
    skipped = con.execute("SELECT count(*) FROM calls_raw WHERE op IS NULL").fetchone()[0]
    if skipped:
        warnings.append(f"{skipped} call(s) of unknown operation skipped")
    con.register("proc_ranks_df", proc_ranks)
    con.execute("CREATE TEMP TABLE proc_ranks AS SELECT report::VARCHAR AS report, pid::BIGINT AS pid, "
                "rank::INTEGER AS rank, local_rank::INTEGER AS local_rank, host::VARCHAR AS host FROM proc_ranks_df")
    con.execute(f"CREATE TABLE collectives AS {duck.sql('collectives')}")
    spans = [s.assign(report=e.report) for e in extracts for s in [e.spans] if len(s)]
    con.execute("CREATE TEMP TABLE proc_spans (report VARCHAR, pid BIGINT, first_ns BIGINT, last_ns BIGINT)")
    if spans:
        con.register("spans_df", pd.concat(spans, ignore_index=True))
        con.execute("INSERT INTO proc_spans BY NAME SELECT report, pid, first_ns, last_ns FROM spans_df")
    con.execute("""CREATE TEMP TABLE rank_spans AS
        SELECT m.rank, min(m.host) AS host, min(s.first_ns) AS first_ns, max(s.last_ns) AS last_ns
        FROM proc_ranks m JOIN proc_spans s ON s.report = m.report AND s.pid = m.pid GROUP BY m.rank""")
    con.execute(f"CREATE TEMP TABLE logical_collectives AS {duck.sql('logical_collectives')}")
    factors = pd.DataFrame(
        [(op, n, ops.busbw_factor(op, n)) for op in ops.OPS
         for n in range(1, 1 + max(2, int(con.execute("SELECT coalesce(max(group_size), 1) FROM collectives").fetchone()[0])))],
        columns=["op", "group_size", "factor"])
    con.register("factors_df", factors)
    con.execute("CREATE TEMP TABLE busbw_factors AS SELECT op, group_size::INTEGER AS group_size, factor FROM factors_df")
    unmatched = con.execute("SELECT count(*) FROM logical_collectives WHERE participants < group_size").fetchone()[0]
    if unmatched:
        warnings.append(f"{unmatched} logical collective(s) were seen on fewer ranks than their group size "
                        f"(ranks missing from the input, or calls outside the capture window)")
    inferred = con.execute("SELECT count(*) FROM collectives WHERE source <> 'wrapper'").fetchone()[0]
    if inferred:
        warnings.append(f"{inferred} call(s) without nsyscomm metadata: matched across ranks by call order, "
                        f"group size inferred from the matched ranks, message size unknown")
    if len(extracts) > 1 and len({e.session_start_utc_ns for e in extracts}) > 1:
        warnings.append("reports come from several nsys sessions: their clocks are used as they are (not aligned)")
    return Result(con, [e.report for e in extracts], warnings, by_caller)


def _empty_select() -> str:
    cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in schema.COLLECTIVES)
    return f"SELECT {cols} WHERE false"
