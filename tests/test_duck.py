"""nsyscomm.duck: query results through Arrow with exactly the frames DuckDB's .df() gives (frame), and
the memory limit as DuckDB states it."""

from __future__ import annotations

import duckdb
import pytest

from nsyscomm import duck

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


# the calls frame of this sample as .df() gave it before duck.frame replaced it (pandas 3)
_DDP_CALLS_DTYPES = {
    "pid": "int64", "tid": "int64", "op": "str", "api": "str", "bytes": "int64", "dtype": "str",
    "numel": "int64", "group": "str", "group_size": "int32", "group_ranks": "object", "seq": "int64",
    "caller": "str", "cpu_start": "int64", "cpu_end": "int64", "gpu_start": "int64", "gpu_end": "int64",
    "stream": "int64", "device": "int64", "source": "str", "kernel": "str", "algo": "str", "proto": "str",
    "kernels": "int64", "kernel_ns": "float64", "peer": "Int32", "step": "Int64",
    "busy_at_start": "Int64", "busy_at_end": "Int64",
}


def test_calls_of_a_sample_keep_the_df_dtypes():
    """The per-report calls (10 text columns, nullable ints, a HUGEINT sum, an all-NULL column)."""
    from pathlib import Path

    from nsyscomm.ingest import nsys_sqlite

    path = Path(__file__).resolve().parent.parent / "sample_reports" / "synthetic_ddp_4rank.sqlite"
    e = nsys_sqlite.extract(path)
    assert len(e.calls) > 0
    assert {k: str(v) for k, v in e.calls.dtypes.items()} == _DDP_CALLS_DTYPES


@pytest.mark.parametrize("limit, expected", [("150MB", int(143.0 * 2**20)), ("4GB", int(3.7 * 2**30)),
                                             ("500KB", int(488.2 * 2**10))])
def test_memory_limit_in_bytes(limit, expected):
    con = duckdb.connect(config={"memory_limit": limit})
    assert duck.memory_limit_bytes(con) == expected   # as DuckDB rounds it: 143.0 MiB
    con.close()


def test_memory_limit_in_a_form_not_known_is_none():
    class Shows:   # what a later DuckDB might state
        def execute(self, sql):
            return self

        def fetchone(self):
            return ("unlimited",)

    assert duck.memory_limit_bytes(Shows()) is None
