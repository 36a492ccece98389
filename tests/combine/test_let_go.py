"""Once the job's database holds a job's calls and per-report tables, combine lets go of the other
copies: the extracts' rows (their list's items are replaced by extracts without them, the
caller's extract objects left as they were) and the calls' Arrow table with the views over it.
The figures stay the same: the goldens and tests/views check them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from nsyscomm.combine import calls as calls_module
from nsyscomm.combine import combine
from nsyscomm.discover import sample_jobs
from nsyscomm.extract.cache import cached_extract
from nsyscomm.ingest.extract_type import TABLES

JOB_TABLES = [t for t in TABLES if t.job_table is not None]


def test_the_job_keeps_one_copy_of_the_rows():
    e = cached_extract(Path(sample_jobs()[0]), "ddp.sqlite", cache=False)
    had = {t.name: len(getattr(e, t.name)) for t in JOB_TABLES if getattr(e, t.name) is not None}
    assert had["gap_kernels"] and had["host_ranges"] and len(e.calls)
    extracts = [e]
    res = combine(extracts)
    got = extracts[0]
    assert got is not e and len(e.gap_kernels) == had["gap_kernels"]  # the caller's extract as it was
    for t in JOB_TABLES:
        if t.name not in had:
            assert getattr(got, t.name) is None, t.name  # absent stays absent (not empty)
            continue
        assert len(getattr(got, t.name)) == 0, t.name
        assert list(getattr(got, t.name).columns) == list(getattr(e, t.name).columns), t.name
        assert res.con.execute(f"SELECT count(*) FROM {t.job_table}").fetchone()[0] == had[t.name], t.name
    views = res.con.execute("SELECT view_name FROM duckdb_views() WHERE view_name IN ('calls', 'calls_typed')")
    assert not views.fetchall()
    with pytest.raises(duckdb.CatalogException):
        res.con.execute("SELECT count(*) FROM calls_arrow")
    assert res.con.execute("SELECT count(*) FROM collectives").fetchone()[0] == len(e.calls)


def test_the_collectives_queries_hand_back_their_working_memory(monkeypatch):
    """DuckDB's allocator keeps what a query freed (duck.connect's flush thresholds): the window
    functions' working memory is handed back before the join that builds the collectives, that
    join's once the table is made, and the whole job stage's before the analyses (at four times
    the benchmark report, each stage's peak was its queries' memory on top of the last's)."""
    from nsyscomm import duck

    seen = []
    release = duck.release_duckdb_memory

    def spy(con):
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if "proc_ranks" in tables:  # the job's database (the extraction's hands back too)
            seen.append(("call_spans" in tables, "collectives" in tables, "busbw_factors" in tables))
        release(con)

    monkeypatch.setattr(duck, "release_duckdb_memory", spy)
    e = cached_extract(Path(sample_jobs()[0]), "ddp.sqlite", cache=False)
    combine([e])  # a small job: its database in memory, which would take the memory back at once
    assert seen == []
    monkeypatch.setattr(calls_module, "FILE_CALLS", 0)  # as a large job's: a file
    combine([e])
    # (call_spans made, collectives made, the job stage done): after the windows, after the
    # join, and once the job's tables are all made, before the analyses' queries
    assert seen == [(True, False, False), (False, True, False), (False, True, True)]


def test_a_file_databases_collectives_queries_run_on_one_thread(monkeypatch):
    """Where the job's database is a file (a large job), the windows and the join that make the
    collectives run on one thread, whose buffers alone count toward the job's peak; the database
    has its threads back for the analyses. In memory they keep every thread."""
    from nsyscomm import duck

    seen = []
    sql = duck.sql

    def spy(name):
        if name in ("call_spans", "collectives"):
            seen.append((name, duck.threads(job.con)))
        return sql(name)

    monkeypatch.setattr(duck, "sql", spy)
    e = cached_extract(Path(sample_jobs()[0]), "ddp.sqlite", cache=False)
    for file in (False, True):
        monkeypatch.setattr(calls_module, "FILE_CALLS", 0 if file else calls_module.BATCH_CALLS)
        job = calls_module.JobCalls()
        threads = 2
        job.con.execute(f"SET threads = {threads}")  # a 2-core machine's, on any machine
        seen.clear()
        res = combine([e], calls=job)
        want = 1 if file else threads
        assert seen == [("call_spans", want), ("collectives", want)], file
        assert duck.threads(res.con) == threads
