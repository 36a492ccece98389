"""Calls held narrow (nsyscomm.ingest.narrow): the same values in fewer bytes, made wide again
exactly, and nothing kept of the wide table DuckDB handed over; the job's collectives the same
from its narrow calls as from the wide ones."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nsyscomm.combine import calls as calls_module
from nsyscomm.combine import combine
from nsyscomm.discover import sample_jobs
from nsyscomm.extract.cache import cached_extract
from nsyscomm.ingest.narrow import narrow, widen
from nsyscomm.ingest.nsys import calls as nsys_calls
from nsyscomm.ingest.nsys import extract


def _wide() -> pa.Table:
    """A wide table as DuckDB hands it over, of every kind of column narrow() looks at."""
    con = duckdb.connect()
    return con.execute(
        "SELECT ['all_reduce', 'broadcast', NULL][1 + i % 3] AS op, "  # few values, some NULL
        "'train.py:' || i AS caller, "  # a value a row: stays text
        "i AS seq, "  # fits 32 bits
        "i * 10000000000 AS cpu_start, "  # does not
        "NULL::BIGINT AS wait_start, "  # no values
        "CASE WHEN i % 2 = 0 THEN i END AS joined, "  # some values
        "(i % 2 = 0) AS setup, "
        "i::INTEGER AS peer, "
        "i / 3 AS ratio "
        "FROM range(5000) t(i)"
    ).to_arrow_table()


def test_narrow_keeps_every_value_in_fewer_bytes():
    wide = _wide()
    n = narrow(wide)
    types = dict(zip(n.column_names, n.schema.types))
    assert pa.types.is_dictionary(types["op"]) and types["op"].index_type == pa.int8()
    assert types["caller"] == wide.schema.field("caller").type
    assert types["seq"] == pa.int32() and types["joined"] == pa.int32()
    assert types["cpu_start"] == pa.int64()
    assert types["wait_start"] == pa.null()
    assert n.nbytes < wide.nbytes / 1.5
    assert widen([n], wide.schema).equals(wide)
    # parts narrowed apart (each its own dictionary and types) put end to end
    parts = [narrow(wide.slice(0, 1)), narrow(wide.slice(1, 2)), narrow(wide.slice(3))]
    assert widen(parts, wide.schema).equals(wide)


def test_widen_lets_go_of_each_narrow_column_once_widened():
    """widen() empties the narrow tables a column at a time: the narrow calls are not held beside
    the whole wide table."""
    wide = _wide()
    parts = [narrow(wide.slice(0, 2)), narrow(wide.slice(2))]
    seen = []
    real_cast = pc.cast

    def cast(c, *a, **kw):
        seen.append(sum(p.num_columns for p in parts))
        return real_cast(c, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pc, "cast", cast)
        assert widen(parts, wide.schema).equals(wide)
    # each column cast with fewer narrow columns left: those before it let go of
    assert seen == sorted(seen, reverse=True) and seen[-1] < seen[0]
    assert [p.num_columns for p in parts] == [0, 0]


def _buffers(t: pa.Table) -> list[tuple[int, int]]:
    return [
        (b.address, b.address + b.size)
        for c in t.columns
        for chunk in c.chunks
        for b in chunk.buffers() + (chunk.dictionary.buffers() if pa.types.is_dictionary(chunk.type) else [])
        if b is not None and b.size
    ]


def test_narrow_keeps_nothing_of_the_wide_table():
    """Each column DuckDB exports holds its whole batch: a column kept as it is would keep every
    wide column's memory, so every column of the narrow table is a copy."""
    wide = _wide()
    held = _buffers(wide)
    for lo, hi in _buffers(narrow(wide)):
        assert not any(a < hi and lo < b for a, b in held)


def test_a_reports_calls_are_held_narrow_between_parts(tmp_path, monkeypatch):
    """The parts of an nsys report's calls wait narrow while the next parts are made, and the
    calls come out as wide as the query gives them, the same rows."""
    from tests.ingest.test_calls_in_parts import _report, _sorted

    path = tmp_path / "parts.sqlite"
    _report(path)
    whole = extract.extract(path).calls
    held = []
    real_widen = nsys_calls.widen

    def spy(parts, schema):
        if "cpu_start" in schema.names:  # the calls, not the step's three columns
            held.extend(parts)
            wide.append(schema)
        return real_widen(parts, schema)

    wide: list = []
    monkeypatch.setattr(nsys_calls, "widen", spy)
    monkeypatch.setattr(nsys_calls, "PART_CALLS", 2)
    parts = extract.extract(path).calls
    assert len(held) > 10
    (wide,) = wide
    narrowed = (pa.null(), pa.int32())  # a column of no values, an int64 column of small values
    assert all(
        any(t in narrowed and (w == pa.int64() or t == pa.null()) for t, w in zip(p.schema.types, wide.types))
        for p in held
        if p.num_rows
    )
    assert parts.schema == whole.schema
    assert _sorted(parts).equals(_sorted(whole))


def test_the_job_holds_its_calls_narrow(monkeypatch):
    """The job's calls wait narrow for the collectives query, which reads the same rows from them
    (a job of two reports: each report's calls narrowed apart, then stacked)."""
    folder = next(p for p in sample_jobs() if p.is_dir())
    extracts = [cached_extract(p, p.name, cache=False) for p in sorted(Path(folder).glob("*.sqlite"))]
    assert len(extracts) == 2
    job = calls_module.JobCalls()
    for i, e in enumerate(extracts):
        job.add(i, e)
    assert sum(t.nbytes for _, _, t in job._pending) < sum(e.calls.nbytes for e in extracts) / 1.5

    def collectives(narrowing) -> list:
        monkeypatch.setattr(calls_module, "narrow", narrowing)
        res = combine(list(extracts))
        return res.con.execute("SELECT * FROM collectives ORDER BY ALL").fetchall()

    assert collectives(narrow) == collectives(lambda t: t)
