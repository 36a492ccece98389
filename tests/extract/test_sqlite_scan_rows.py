"""How the C scan (nsyscomm/ingest/nsys/_sqlite_scan.c) is handed the rows: its row functions
called inside SQLite's own loop, and the registered names read through SQLite, each the same as
what DuckDB's statements read."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from nsyscomm import duck
from nsyscomm.ingest import limits
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import reader as nsys_reader
from nsyscomm.ingest.nsys import scan_arrow
from tests.conftest import ROOT

try:
    from nsyscomm.ingest.nsys import _sqlite_scan
except ImportError:
    _sqlite_scan = None

needs_scan = pytest.mark.skipif(_sqlite_scan is None, reason="nsyscomm.ingest.nsys._sqlite_scan not built")
DDP = ROOT / "sample_reports" / "synthetic_ddp_4rank.sqlite"


def _ranges_report(path, rows):
    con = sqlite3.connect(path)
    con.execute(
        'CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, '
        "textId INTEGER, text TEXT)"
    )
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 1, NULL, ?)", rows)
    con.commit()
    con.close()


def _scan_ranges(path, sql, rows):
    return _sqlite_scan.scan(
        nsys_reader.read_only_uri(path),
        None,
        1,
        0,
        None,
        1,
        0,
        sql,
        1,
        rows,
        2,
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        [],
        bytearray(1),
        100_000,
    )


@needs_scan
def test_scan_takes_only_its_row_functions_statements(tmp_path):
    """The scan reads what its row functions are called with: a statement that hands it rows
    instead (a plain SELECT of the same columns) would leave every table empty without a word, so
    the scan refuses it (ValueError: the caller then takes DuckDB's copy)."""
    path = tmp_path / "nvtx.sqlite"
    rows = [(i, i + 5, f"nccl:AllReduce {i}") for i in range(3)]
    _ranges_report(path, rows)
    columns = 'start, "end", eventType, globalTid, textId, text'
    out = _scan_ranges(path, scan_arrow.rows_sql("NVTX_EVENTS", "nsyscomm_range", columns), len(rows))
    assert np.frombuffer(out["nvtx"]["start"][0], np.int64).tolist() == [0, 1, 2]
    assert out["spans"] == [(0, 0, 7)]
    for sql in (
        f"SELECT {columns} FROM NVTX_EVENTS WHERE rowid BETWEEN ? AND ?",
        f"SELECT count(*) + 1 FROM NVTX_EVENTS WHERE rowid BETWEEN ? AND ? AND nsyscomm_range({columns})",
    ):
        with pytest.raises(ValueError, match="row function"):
            _scan_ranges(path, sql, len(rows))


@needs_scan
def test_row_functions_stop_at_a_bad_value(tmp_path):
    """A value of another type ends the statement inside SQLite's loop with the scan's own error."""
    path = tmp_path / "nvtx.sqlite"
    _ranges_report(path, [(0, 1, "nccl:a"), (1.5, 2, "nccl:b")])
    sql = scan_arrow.rows_sql("NVTX_EVENTS", "nsyscomm_range", 'start, "end", eventType, globalTid, textId, text')
    with pytest.raises(ValueError, match="unexpected type in NVTX_EVENTS"):
        _scan_ranges(path, sql, 2)


def _string_ids(path, values, schema="id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL"):
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE StringIds ({schema})")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(values, 1)))
    con.commit()
    con.close()


def _duckdb_names(path):
    """_scan's DuckDB statement, which _registered_names stands in for."""
    con = duck.connect(sqlite=True)
    con.execute(f"ATTACH '{path}' AS r (TYPE sqlite, READ_ONLY)")
    like = " OR ".join(f"value LIKE '{p}'" for p in nsys_reader._RANGE_PATTERNS)
    return con.execute(f"SELECT id, {limits.cut_sql('value')} FROM r.StringIds WHERE {like} ORDER BY id").fetchall()


def _registered(path):
    lite = sqlite3.connect(nsys_reader.read_only_uri(path), uri=True)
    try:
        return scan_arrow.registered_names(lite, nsys_reader._RANGE_PATTERNS)
    finally:
        lite.close()


def test_registered_names_are_duckdbs(tmp_path):
    """The names read through SQLite are the ones DuckDB's statement reads: the same prefixes,
    case-sensitive, the same cut of long names (in characters, not bytes), in id order."""
    long = "nsyscomm:all_reduce|caller=" + "\u00e9\U0001f600x" * (limits.MAX_NAME // 2)
    values = [
        "nccl:AllReduce",
        "NCCL:upper",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",
        long,
        "gloo:all_reduce",
        "ProfilerStep#3",
        "profilerstep#3",
        "aten::mm",
        "x nccl",
        "nsyscomm",
        "nsyscomm.rank|rank=0",
        "\u4e2d nccl",
        "",
        "HOME=/root\x00PWD=/tmp",  # nsys's environment strings hold NULs
    ]
    path = tmp_path / "names.sqlite"
    _string_ids(path, values)
    got = _registered(path)
    assert got == _duckdb_names(path)
    assert [i for i, _ in got] == [1, 3, 4, 5, 6, 10, 11]
    assert got[2][1].endswith(limits.CUT_MARK) and len(got[2][1]) == limits.MAX_NAME + len(limits.CUT_MARK)


@pytest.mark.parametrize(
    "case",
    ["blob", "nul", "not_utf8", "id_not_rowid", "value_not_text"],
)
def test_registered_names_leave_the_odd_tables_to_duckdb(tmp_path, case):
    """Wherever DuckDB might read StringIds otherwise (or fail on it), the SQLite reading steps
    aside (None) and DuckDB's statement answers, its errors included."""
    path = tmp_path / "names.sqlite"
    schema = {
        "id_not_rowid": "id INTEGER NOT NULL, value TEXT NOT NULL",
        "value_not_text": "id INTEGER NOT NULL PRIMARY KEY, value VARCHAR(10) NOT NULL",
    }
    _string_ids(path, ["nccl:a", "nccl:b"], **({"schema": schema[case]} if case in schema else {}))
    odd = {"blob": b"nccl:c", "nul": "nccl:\x00c", "not_utf8": None}
    if case in odd:
        con = sqlite3.connect(path)
        if case == "not_utf8":
            con.execute("INSERT INTO StringIds VALUES (3, CAST(? AS TEXT))", (b"aten\xff",))
        else:
            con.execute("INSERT INTO StringIds VALUES (3, ?)", (odd[case],))
        con.commit()
        con.close()
    assert _registered(path) is None


@pytest.mark.skipif(not DDP.exists(), reason="bundled sample missing")
@pytest.mark.parametrize("value", [b"aten::odd\xff", b"nccl:odd\xff"])
def test_a_registered_string_that_is_not_utf8_reads_as_before(tmp_path, monkeypatch, value):
    """A StringIds value that is not UTF-8, a name that matters or not: the extract is the one
    DuckDB's statement gives (the SQLite reading steps aside for it)."""
    path = tmp_path / "r.sqlite"
    shutil.copy(DDP, path)
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO StringIds (id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), CAST(? AS TEXT))", (value,)
    )
    con.commit()
    con.close()
    assert _registered(path) is None
    ex = nsys_extract.extract(path)
    monkeypatch.setattr(nsys_reader, "registered_names", lambda lite, patterns: None)
    before = nsys_extract.extract(path)
    assert ex.warnings == before.warnings
    assert ex.calls.equals(before.calls)
