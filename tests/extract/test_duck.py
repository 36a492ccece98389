"""nsyscomm.duck: query results through Arrow with exactly the frames DuckDB's .df() gives (frame), and
the memory limit as DuckDB states it."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from nsyscomm import duck
from tests.conftest import ROOT, SAMPLES

_TABLE = """CREATE TABLE x AS SELECT i::BIGINT AS a, CASE WHEN i % 2 = 0 THEN i END::INTEGER AS b,
    sum(i) OVER () AS s, 'x' || i AS c, NULL::VARCHAR AS d, CASE WHEN i = 1 THEN 'q' END AS e,
    i::DOUBLE AS f, i > 2 AS g, (i * 10)::SMALLINT AS h
    FROM range(5) t(i)"""


@pytest.mark.parametrize("where", ["", "WHERE false", "WHERE a = 1"])
def test_frame_equals_df(where):
    con = duck.connect()
    con.execute(_TABLE)
    q = f"SELECT * FROM x {where}"
    want = con.execute(q).df()
    got = duck.frame(con.execute(q))
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    assert got.equals(want)
    assert list(got.columns) == list(want.columns)


# the calls of this sample in pandas as .df() gave them before duck.frame replaced it (pandas 3);
# kernel_ns is a BIGINT since the calls stay in Arrow (a HUGEINT sum before: float64), and the busy
# times, NULL-free here, are plain integers (pandas' nullable ones before)
_DDP_CALLS_DTYPES = {
    "pid": "int64",
    "tid": "int64",
    "op": "str",
    "api": "str",
    "bytes": "int64",
    "dtype": "str",
    "numel": "int64",
    "group": "str",
    "group_size": "int32",
    "group_ranks": "object",
    "seq": "int64",
    "caller": "str",
    "cpu_start": "int64",
    "cpu_end": "int64",
    "gpu_start": "int64",
    "gpu_end": "int64",
    "stream": "int64",
    "device": "int64",
    "source": "str",
    "kernel": "str",
    "algo": "str",
    "proto": "str",
    "kernels": "int64",
    "kernel_ns": "int64",
    "peer": "Int32",
    "exec_start": "Int64",
    "exec_end": "Int64",
    "wait_start": "Int64",
    "wait_end": "Int64",
    "step": "Int64",
    "busy_at_start": "int64",
    "busy_at_end": "int64",
    "joined": "Int64",
}


def test_calls_of_a_sample_keep_the_df_dtypes():
    """The per-report calls, in Arrow (10 text columns, nullable ints, a sum, an all-NULL column),
    as pandas through arrow_frame, and no 128-bit decimal: Arrow tables of reports are stacked."""

    import pyarrow as pa

    from nsyscomm.ingest.nsys import extract as nsys_extract

    path = SAMPLES / "synthetic_ddp_4rank.sqlite"
    e = nsys_extract.extract(path)
    assert isinstance(e.calls, pa.Table) and len(e.calls) > 0
    assert not any(pa.types.is_decimal(f.type) for f in e.calls.schema)
    assert {k: str(v) for k, v in duck.arrow_frame(e.calls).dtypes.items()} == _DDP_CALLS_DTYPES


def test_arrow_frame_of_large_strings_and_null_columns():
    """Tables that went through pandas and Parquet (large_string, null type) as .df() would give them."""
    import pyarrow as pa

    t = pa.table(
        {
            "a": pa.array(["x", None], pa.large_string()),
            "b": pa.array([None, None], pa.large_string()),
            "c": pa.array([None, None], pa.null()),
            "d": pa.array([1, None], pa.int64()),
        }
    )
    got = duck.arrow_frame(t)
    want = duck.connect().sql("SELECT a, b, d FROM t").df()  # DuckDB reads Arrow's null type as INTEGER
    assert {k: str(v) for k, v in got[["a", "b", "d"]].dtypes.items()} == {k: str(v) for k, v in want.dtypes.items()}
    assert got["b"].tolist() == [None, None] and got["c"].tolist() == [None, None]
    assert got["d"].tolist() == [1, pd.NA]


@pytest.mark.parametrize(
    "limit, expected", [("150MB", int(143.0 * 2**20)), ("4GB", int(3.7 * 2**30)), ("500KB", int(488.2 * 2**10))]
)
def test_memory_limit_in_bytes(limit, expected):
    con = duckdb.connect(config={"memory_limit": limit})
    assert duck.memory_limit_bytes(con) == expected  # as DuckDB rounds it: 143.0 MiB
    con.close()


def _rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="resident memory read from /proc")
def test_dropped_tables_memory_goes_back_to_the_system(monkeypatch):
    """connect()'s database keeps what a dropped table held (its allocator's flush thresholds);
    release_duckdb_memory() hands it back, and leaves the thread count as it was."""
    monkeypatch.delenv(duck.MEMORY_LIMIT_ENV, raising=False)  # the table in memory, not spilled
    con = duck.connect(threads=2)
    con.execute("CREATE TABLE big AS SELECT i::BIGINT AS a, i::BIGINT AS b FROM range(20000000) t(i)")  # 320 MB
    held = _rss_mb()
    con.execute("DROP TABLE big")
    duck.release_duckdb_memory(con)
    assert _rss_mb() < held - 200, (held, _rss_mb())
    assert duck.threads(con) == 2
    con.close()


def test_memory_limit_in_a_form_not_known_is_none():
    class Shows:  # what a later DuckDB might state
        def execute(self, sql):
            return self

        def fetchone(self):
            return ("unlimited",)

    assert duck.memory_limit_bytes(Shows()) is None


def test_rows_that_tie_on_the_sort_keys_come_out_in_one_order():
    """Collectives of two communicators that tie on every earlier sort key (the same skew, op
    and seq; the same rank, times and seq) are ordered by communicator, whatever order they were
    stored in: the JSON's top_skew and the what-if replay's per-rank order are the same every run.
    Stored in the reverse of that order, so that insertion order cannot pass for it."""
    con = duck.connect()
    try:
        con.execute(
            "CREATE TABLE logical_collectives AS SELECT * FROM (VALUES (2, 'g9', NULL, 'all_reduce', 1, 8, 2, "
            "'x.py:1', 0, 2, 10, 100, 300, 1, false, false, true, 200, false), "
            "(1, 'g1', NULL, 'all_reduce', 1, 8, 2, 'x.py:1', 0, 2, 10, 100, 300, 0, false, false, true, 200, false)) "
            'v(logical_id, "group", pair, op, seq, bytes, group_size, caller, step, participants, latency_ns, '
            "first_arrival, last_arrival, last_rank, setup, startup, completed, late_ns, shadow)"
        )
        top = con.execute(duck.sql("top_skew"), {"limit": 2}).fetchall()
        assert [r[1] for r in top] == ["g1", "g9"]
        con.execute(
            "CREATE TABLE collectives AS SELECT * FROM (VALUES (0, 0, 'all_reduce', 8, 'g9', NULL, 1, 2, 2, 100, "
            "300, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::VARCHAR, NULL::INTEGER), "
            "(0, 0, 'all_reduce', 8, 'g1', NULL, 1, 1, 2, 100, 300, NULL, NULL, NULL, NULL, NULL, NULL)) "
            'v(rank, step, op, bytes, "group", pair, seq, logical_id, group_size, cpu_start, cpu_end, gpu_start, '
            "gpu_end, busy_at_start, busy_at_end, caller, peer)"
        )
        con.execute("ALTER TABLE collectives ADD COLUMN exec_start BIGINT DEFAULT NULL")
        con.execute("ALTER TABLE collectives ADD COLUMN exec_end BIGINT DEFAULT NULL")
        con.execute("ALTER TABLE collectives ADD COLUMN init_ns BIGINT DEFAULT NULL")
        con.execute("ALTER TABLE collectives ADD COLUMN joined BIGINT DEFAULT NULL")
        for col in ("wait_start", "wait_end", "queued_ns"):
            con.execute(f"ALTER TABLE collectives ADD COLUMN {col} BIGINT DEFAULT NULL")
        con.execute(
            "UPDATE collectives SET exec_start = coalesce(gpu_start, cpu_start), exec_end = coalesce(gpu_end, cpu_end)"
        )
        ops = con.execute(duck.sql("replay_ops")).fetchall()
        assert [r[6] for r in ops] == [1, 2]  # sync_id: g1's collective first
    finally:
        con.close()


def test_calls_without_seq_that_tie_on_time_are_numbered_in_one_order():
    """Two NCCL kernels of one rank with no wrapper metadata, started at the same nanosecond on
    two streams: their seq (the order among the rank's calls of that op, which matches them
    across ranks) goes to the lower stream first, whatever order the calls were stored in."""
    from nsyscomm.combine.calls import _typed_select, create_collectives

    con = duck.connect()
    try:
        con.execute(f"CREATE TABLE calls AS {_typed_select(None, '')}")
        for call_id, stream in enumerate((7, 3)):  # stored in the reverse of the expected order
            con.execute(
                "INSERT INTO calls (report, pid, tid, op, cpu_start, cpu_end, gpu_start, gpu_end, stream, device, "
                "call_id) VALUES ('r', 1, 1, 'all_reduce', 50, 60, 100, 200, ?, 0, ?)",
                [stream, call_id],
            )
        con.execute(
            "CREATE TABLE proc_ranks AS SELECT 'r' AS report, 1::BIGINT AS pid, 0 AS rank, 0 AS local_rank, "
            "NULL::VARCHAR AS host"
        )
        create_collectives(con)
        got = con.execute("SELECT stream, seq FROM collectives ORDER BY seq").fetchall()
    finally:
        con.close()
    assert got == [(3, 0), (7, 1)]


def test_sql_and_samples_are_those_of_the_imported_tree(tmp_path):
    """A copy of the code on PYTHONPATH reads its own sql/ and sample_reports/, though an editable
    install of this checkout answers for nsyscomm.sql (the trap of the benchmarks' --baseline
    runs and of a clean clone's install): changed SQL in the copy is what the copy runs."""
    import shutil
    import subprocess
    import sys

    root = ROOT
    shutil.copytree(root / "nsyscomm", tmp_path / "nsyscomm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "sql", tmp_path / "sql")
    (tmp_path / "sample_reports").mkdir()
    shutil.copy(root / "sample_reports" / "synthetic_ddp_4rank.sqlite", tmp_path / "sample_reports")
    (tmp_path / "sql" / "summary.sql").write_text("SELECT 'the copy''s own SQL' AS marker")
    code = (
        "import nsyscomm, nsyscomm.duck as d, nsyscomm.discover as s\n"
        "print(nsyscomm.__file__); print(d.sql_dir()); print(s.sample_reports_dir()); print(d.sql('summary'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    package, sql, samples, summary = out.stdout.splitlines()
    assert Path(package).parent == tmp_path / "nsyscomm"
    assert Path(sql) == tmp_path / "sql"
    assert Path(samples) == tmp_path / "sample_reports"
    assert summary == "SELECT 'the copy''s own SQL' AS marker"


def test_a_small_inputs_databases_run_on_one_thread(tmp_path):
    """Inside small_input() of inputs under SMALL_INPUT_BYTES, a database made without a thread
    count runs on one thread, and release_duckdb_memory() changes nothing; a thread count asked
    for is kept, and outside the block (or for larger inputs) DuckDB's default holds."""
    default = duck.threads(duck.connect())
    small = tmp_path / "small.sqlite"
    small.write_bytes(b"x" * 1000)
    statements: list[str] = []

    class Recorded:  # a connection that records what it is asked
        def execute(self, sql):
            statements.append(sql)
            return self

        def fetchone(self):
            return (1,)

    with duck.small_input([small]) as is_small:
        assert is_small
        assert duck.threads(duck.connect()) == 1
        assert duck.threads(duck.connect(threads=2)) == 2
        duck.release_duckdb_memory(Recorded())  # type: ignore[arg-type]
        assert statements == []
    assert duck.threads(duck.connect()) == default
    duck.release_duckdb_memory(Recorded())  # type: ignore[arg-type]
    assert statements[-2:] == ["SET threads = 2", "SET threads = 1"]
    large = tmp_path / "large.sqlite"
    with open(large, "wb") as f:
        f.truncate(duck.SMALL_INPUT_BYTES)  # sparse: its size, not its bytes, is what counts
    with duck.small_input([large]) as is_small:
        assert not is_small
        assert duck.threads(duck.connect()) == default
    with duck.small_input([small, tmp_path / "gone.sqlite"]) as is_small:
        assert not is_small  # a size that cannot be read counts as large


def test_a_small_input_is_measured_with_its_folders_files(tmp_path):
    """A report folder (per-table files) counts with its files' sizes."""
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "a.arrow").write_bytes(b"x" * 300)
    (folder / "b.arrow").write_bytes(b"x" * 200)
    assert duck.input_bytes([folder, folder / "a.arrow"]) == 800
