"""The two routes of a report through the ingest: in memory (the C scan, busy islands in numpy) when
its kernels fit in a quarter of DuckDB's memory limit, else in DuckDB (its copy of the tables,
islands in SQL), which spills. The same extract either way."""

from __future__ import annotations

from contextlib import closing

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from nsyscomm import duck
from nsyscomm.ingest import busy
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import reader as nsys_reader
from tests.conftest import real_nsys_files, ro
from tests.extract.test_sqlite_scan import SAMPLES, _same


def _kernels(rng, n: int) -> pd.DataFrame:
    """Kernels of 3 processes x 2 devices (and unknown ones): runs of back-to-back, overlapping,
    nested, zero-length and identical kernels, with gaps."""
    start = np.cumsum(rng.choice([0, 0, 1, 5, 40, 300], size=n))
    length = rng.choice([0, 1, 5, 50, 400], size=n)
    pid = rng.choice([11, 12, 13], size=n)
    dev = rng.choice([0, 1], size=n).astype(float)
    dev[rng.random(n) < 0.05] = np.nan
    shuffle = rng.permutation(n)  # the tables are in no order
    return pd.DataFrame(
        {
            "globalPid": (pid << 24)[shuffle],
            "deviceId": dev[shuffle],
            "start": start[shuffle],
            "end": (start + length)[shuffle],
            "shortName": rng.choice([1, 2, 99], size=n)[shuffle],
        }
    )


def _calls(rng, n: int, hi: int) -> pd.DataFrame:
    s = rng.integers(-50, hi + 50, size=n)
    calls = pd.DataFrame(
        {
            "pid": pd.array(rng.choice([11, 12, 13, 14], size=n), dtype="Int64"),
            "device": pd.array(rng.choice([0, 1, 2], size=n), dtype="Int64"),
            "gpu_start": pd.array(s, dtype="Int64"),
            "gpu_end": pd.array(s + rng.integers(0, 500, size=n), dtype="Int64"),
        }
    )
    calls.loc[rng.random(n) < 0.1, "gpu_end"] = pd.NA  # CPU-only or cut calls
    calls.loc[rng.random(n) < 0.05, "pid"] = pd.NA
    calls.loc[rng.random(n) < 0.05, "device"] = pd.NA
    return calls


@pytest.mark.parametrize("seed", range(6))
def test_islands_in_duckdb_give_numpys_busy_times(seed):
    rng = np.random.default_rng(seed)
    kernels = _kernels(rng, 3000)
    con = duck.connect()
    con.execute("CREATE TABLE src_kernels AS SELECT * FROM kernels")
    # kernel names 1 and 2 are NCCL's: not compute
    con.execute("CREATE TABLE nccl_kernel_names AS SELECT * FROM (VALUES (1), (2)) v(id)")
    calls = pa.Table.from_pandas(_calls(rng, 2000, int(kernels["end"].max())), preserve_index=False)
    in_memory = busy.busy_at_edges(calls, busy.islands(con.execute(duck.sql("compute_kernels")).fetchnumpy()))
    busy.islands_in_duckdb(con)
    in_duckdb = busy.busy_at_edges_in_duckdb(calls, con)
    assert in_memory.equals(in_duckdb)
    got = duck.arrow_frame(in_memory)
    assert got["busy_at_end"].fillna(0).sum() > 0  # the comparison is not between zeros
    assert (got["busy_at_end"] >= got["busy_at_start"]).all()
    # NULL exactly for the calls without both GPU edges
    assert (got["busy_at_start"].isna() == (got["gpu_start"].isna() | got["gpu_end"].isna())).all()
    con.close()


def _reports():
    return sorted(SAMPLES.rglob("*.sqlite")) + real_nsys_files()


@pytest.mark.parametrize("path", _reports(), ids=lambda p: p.name)
def test_same_extract_in_duckdb(path, monkeypatch):
    in_memory = nsys_extract.extract(path)
    # no kernel fits: every report takes the DuckDB route
    monkeypatch.setattr(nsys_reader, "IN_MEMORY_BYTES_PER_KERNEL", 1 << 50)
    routes = []
    real_islands, real_open = nsys_extract.islands_in_duckdb, nsys_extract.open_report
    monkeypatch.setattr(nsys_extract, "islands_in_duckdb", lambda con: routes.append("islands") or real_islands(con))

    def spy(path, threads=None):
        opened = real_open(path, threads)
        routes.append("copy" if opened.compute is None else "scan")
        return opened

    monkeypatch.setattr(nsys_extract, "open_report", spy)
    in_duckdb = nsys_extract.extract(path)
    with closing(ro(path)) as lite:
        has_kernels = (
            "CUPTI_ACTIVITY_KIND_KERNEL" in nsys_reader.table_columns(path)
            and lite.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] > 0
        )
    if has_kernels:  # without kernels there is nothing to hold: either route
        assert routes == ["copy", "islands"]
    _same(in_memory, in_duckdb, gaps=not has_kernels)


@pytest.mark.skipif(nsys_reader.sqlite_scan_module() is None, reason="no C scan: every report is read by DuckDB")
def test_the_route_follows_the_memory_limit(monkeypatch):
    """In memory up to a quarter of DuckDB's limit (as DuckDB states it: 64MB is 61.0 MiB)."""
    fsdp = SAMPLES / "synthetic_fsdp_8rank.sqlite"
    with closing(ro(fsdp)) as lite:
        kernels = lite.execute("SELECT max(rowid) - min(rowid) + 1 FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    monkeypatch.setenv(duck.MEMORY_LIMIT_ENV, "64MB")
    quarter = int(61.0 * 2**20) // 4
    for per_kernel, in_memory in ((quarter // kernels, True), (quarter // kernels + 1, False)):
        monkeypatch.setattr(nsys_reader, "IN_MEMORY_BYTES_PER_KERNEL", per_kernel)
        opened = nsys_reader.open_report(fsdp)
        opened.con.close()
        assert (opened.compute is not None) == in_memory, per_kernel


# what the calls are made of: kernels, launches, ranges and the lookups between them
_ROWS = {
    "src_kernels",
    "src_runtime",
    "nccl_kernels",
    "innermost",
    "ranges",
    "range_rows",
    "src_ranges",
    "src_ranges_all",
}


def _objects(con) -> set[str]:
    """The tables and views of the report's database (the report itself, attached as r, left out)."""
    return {
        n
        for (n,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name IN ('memory', 'temp') "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name IN ('memory', 'temp')"
        ).fetchall()
    }


@pytest.mark.parametrize("route", ["scan", "copy"])
def test_the_rows_are_dropped_once_the_calls_are_complete(route, monkeypatch):
    """The steps after the calls (the kernels in each call's gap, the OS-runtime calls) run beside
    none of the report's rows; on the C scan's route its NCCL kernels go once nccl_kernels holds
    them, before the calls are made."""
    if route == "scan" and nsys_reader.sqlite_scan_module() is None:
        pytest.skip("no C scan: every report is read by DuckDB")
    if route == "copy":
        monkeypatch.setattr(nsys_reader, "IN_MEMORY_BYTES_PER_KERNEL", 1 << 50)
    seen: dict[str, set[str]] = {}
    real_calls, real_busy = nsys_extract.nsys_calls.calls, nsys_extract._busy_at_edges

    def calls(con, *args):
        seen["calls"] = _objects(con)
        return real_calls(con, *args)

    def busy(pool, con, calls, compute):
        seen["after"] = _objects(con)
        return real_busy(pool, con, calls, compute)

    monkeypatch.setattr(nsys_extract.nsys_calls, "calls", calls)
    monkeypatch.setattr(nsys_extract, "_busy_at_edges", busy)
    ex = nsys_extract.extract(SAMPLES / "synthetic_fsdp_8rank.sqlite")
    assert ex.calls.num_rows
    assert {"nccl_kernels", "src_ranges"} <= seen["calls"]  # the check sees the tables that are there
    assert not seen["after"] & _ROWS
    if route == "scan":
        assert "src_kernels" not in seen["calls"]
    else:
        assert "compute_islands" in seen["after"]  # what the busy times are read from


@pytest.mark.skipif(nsys_reader.sqlite_scan_module() is None, reason="no C scan: every report is read by DuckDB")
def test_the_islands_are_made_after_the_calls(monkeypatch):
    """The busy islands are made as the busy times at the calls' edges read them, once the
    report's rows are let go of, not beside the calls query (where they added to its peak)."""
    made, at_calls = [], []
    real_slices, real_process, real_calls = (
        busy._islands_in_slices,
        busy._islands_of_process,
        nsys_extract.nsys_calls.calls,
    )
    monkeypatch.setattr(busy, "_islands_in_slices", lambda *a: made.append(a[0]) or real_slices(*a))
    monkeypatch.setattr(busy, "_islands_of_process", lambda *a: made.append(a[0]) or real_process(*a))

    def calls(con, *args):
        got = real_calls(con, *args)
        at_calls.append(len(made))
        return got

    monkeypatch.setattr(nsys_extract.nsys_calls, "calls", calls)
    ex = nsys_extract.extract(SAMPLES / "synthetic_fsdp_8rank.sqlite")
    assert at_calls == [0]
    assert len(set(made)) == 8  # every process's, after the calls
    assert ex.calls["busy_at_end"].null_count < ex.calls.num_rows
