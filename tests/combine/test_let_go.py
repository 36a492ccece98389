"""Once the job's database holds a job's calls and per-report tables, combine lets go of the other
copies: the extracts' rows (their list's items are replaced by extracts without them, the
caller's extract objects left as they were) and the calls' Arrow table with the views over it.
The figures stay the same: the goldens and tests/views check them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

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
