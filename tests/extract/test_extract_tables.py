"""An Extract's per-report tables, declared once (nsyscomm.ingest.extract_type.TABLES): the
dataclass, the extract cache and combine's job tables all follow the declaration; and the cache's
fingerprint covers the code that makes an extract, not the SQL of the result tables."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from nsyscomm import api, duck
from nsyscomm.extract import cache
from nsyscomm.ingest.extract_type import TABLE, TABLES, Extract

SAMPLE = api.sample_reports_dir() / "synthetic_ddp_4rank.sqlite"


def test_the_dataclass_holds_the_declared_tables_in_order():
    table_fields = [f.name for f in dataclasses.fields(Extract) if f.name in TABLE]
    assert table_fields == [t.name for t in TABLES]
    others = {f.name for f in dataclasses.fields(Extract)} - set(TABLE)
    assert others == {"report", "path", "session_start_utc_ns", "nsys_version", "warnings", "windowed"}, (
        "a field of Extract that is a per-report table is declared in TABLES"
    )


def _full_extract(path: Path) -> Extract:
    """An Extract with a row in every declared table, each column of its declared type."""
    value = {"BIGINT": 7, "INTEGER": 3, "DOUBLE": 1.5, "VARCHAR": "x", "BOOLEAN": True}
    tables = {}
    for t in TABLES:
        df = pd.DataFrame({n: [value[ty]] for n, ty, _ in t.columns})
        tables[t.name] = pa.Table.from_pandas(df, preserve_index=False) if t.arrow else df
    return Extract(
        report="r", path=path, session_start_utc_ns=5, nsys_version="v", warnings=["w"], windowed=True, **tables
    )


def test_the_cache_stores_and_loads_every_declared_table(tmp_path):
    src = tmp_path / "r.sqlite"
    src.write_bytes(b"not read: the entry is keyed by the file's size and time")
    e = _full_extract(src)
    assert cache.store(e, src, root=tmp_path / "c") is not None
    back = cache.load(src, "r", root=tmp_path / "c")
    assert back is not None
    for t in TABLES:
        got, want = getattr(back, t.name), getattr(e, t.name)
        if t.arrow:
            assert isinstance(got, pa.Table) and got.equals(want), t.name
        else:
            pd.testing.assert_frame_equal(got, want, obj=t.name)
    assert (back.session_start_utc_ns, back.nsys_version, back.warnings, back.windowed) == (5, "v", ["w"], True)


def test_a_table_the_report_lacks_stays_absent_through_the_cache(tmp_path):
    src = tmp_path / "r.sqlite"
    src.write_bytes(b"x")
    e = dataclasses.replace(_full_extract(src), host_calls=None, gap_kernels=None)
    cache.store(e, src, root=tmp_path / "c")
    back = cache.load(src, "r", root=tmp_path / "c")
    assert back is not None and back.host_calls is None and back.gap_kernels is None
    assert back.host_ranges is not None


def test_combine_makes_each_job_table_with_the_declared_columns_and_types():
    r = api.load([SAMPLE], cache=False)
    for t in TABLES:
        if t.job_table is None:
            continue
        got = r.con.execute(f"DESCRIBE {t.job_table}").fetchall()
        want = [("report", "VARCHAR")] + [(n, ty) for n, ty, _ in t.columns if n not in t.reader_only]
        assert [(c[0], c[1]) for c in got] == want, t.job_table
        if t.reports_table is not None:
            assert r.con.execute(f"DESCRIBE {t.reports_table}").fetchall()[0][:2] == ("report", "VARCHAR")


@pytest.fixture
def sql_copy(tmp_path, monkeypatch):
    """A copy of sql/ that the fingerprint reads instead of the real one."""
    d = tmp_path / "sql"
    shutil.copytree(duck.sql_dir(), d)
    monkeypatch.setattr(duck, "sql_dir", lambda: d)
    cache.code_fingerprint.cache_clear()
    yield d
    cache.code_fingerprint.cache_clear()


def _edit(path: Path) -> str:
    cache.code_fingerprint.cache_clear()
    before = cache.code_fingerprint()
    path.write_text(path.read_text() + "\n-- edited\n")
    cache.code_fingerprint.cache_clear()
    return before


def test_editing_a_result_tables_sql_keeps_the_extract_cache(sql_copy):
    for name in ("logical_collectives", "summary", "late_arrivals", "collectives"):
        before = _edit(sql_copy / f"{name}.sql")
        assert cache.code_fingerprint() == before, f"editing sql/{name}.sql invalidated every extract"


def test_editing_the_sql_an_extraction_reads_renews_the_cache(sql_copy):
    for name in ("calls_nsys", "nccl_kernels", "compute_islands", "link_usage"):
        before = _edit(sql_copy / f"{name}.sql")
        assert cache.code_fingerprint() != before, f"sql/{name}.sql makes extracts, yet the cache kept them"


def test_the_fingerprint_sees_every_sql_file_the_extraction_reads():
    """The fingerprint finds the SQL an extraction reads by its literal name in duck.sql("...")
    calls: a call with a computed name would escape it."""
    code = [p for p in cache.extraction_code() if p.suffix == ".py"]
    calls = [(p, m) for p in code for m in re.findall(r"duck\.sql\(([^)]*)\)", p.read_text())]
    assert calls, "the extraction reads SQL files: the scan found none"
    computed = [f"{p.name}: duck.sql({arg})" for p, arg in calls if not re.fullmatch(r"""\s*["'][\w]+["']\s*""", arg)]
    assert not computed, f"SQL read under a computed name, unseen by the cache fingerprint: {computed}"
    other_ways = [
        p.name
        for p in code
        if re.search(r"from nsyscomm\.duck import[^\n]*\bsql\b", p.read_text())
        or ("sql_dir" in p.read_text() and p.name not in ("cache.py", "duck.py"))
    ]
    assert not other_ways, f"SQL read other than by duck.sql(NAME), unseen by the cache fingerprint: {other_ways}"
    sql = {p.stem for p in cache.extraction_code() if p.suffix == ".sql"}
    assert {"calls_nsys", "process_spans", "busy_at_edges", "copies_nsys"} <= sql
    assert not sql & {"logical_collectives", "summary", "collectives", "late_arrivals"}
