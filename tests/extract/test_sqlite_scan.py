"""The ingest's C scan of nsys exports (nsyscomm/ingest/nsys/_sqlite_scan.c) against DuckDB's copy of
the tables (ingest/nsys/reader.py's _copy_tables): the same extract from every report, whatever it holds."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from nsyscomm.ingest import compute_columns
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import reader as nsys_reader
from nsyscomm.ingest.nsys import scan_arrow
from tests.conftest import ROOT, real_nsys_files

SAMPLES = ROOT / "sample_reports"
FSDP = SAMPLES / "synthetic_fsdp_8rank.sqlite"

try:
    from nsyscomm.ingest.nsys import _sqlite_scan
except ImportError:
    _sqlite_scan = None


def _buildable() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    inc = sysconfig.get_paths()["include"]
    return (
        bool(shutil.which(cc))
        and os.path.exists(os.path.join(inc, "Python.h"))
        and os.path.exists("/usr/include/sqlite3.h")
    )


def test_scan_is_built_where_it_can_be(monkeypatch):
    if _sqlite_scan is None:
        assert not _buildable(), "a C compiler, Python.h and sqlite3.h are here, yet _sqlite_scan was not built"
        pytest.skip("no C compiler or SQLite headers at install time: reports are read by DuckDB's SQLite scanner")
    # built: the reader must load it and read a report through it, not fall back to the copy
    assert nsys_reader.sqlite_scan_module() is _sqlite_scan
    scanned, _, seen = _extract_both(FSDP, monkeypatch)
    assert seen and seen[0] is not None, "the built scan gave way to DuckDB's copy on a plain sample"
    assert len(scanned.calls) > 0


needs_scan = pytest.mark.skipif(_sqlite_scan is None, reason="nsyscomm.ingest.nsys._sqlite_scan not built")


def _extract_both(path: Path, monkeypatch):
    """(extract through the C scan, extract through DuckDB's copy, the compute kernels _scan
    returned: None when it gave way to the copy)"""
    seen = []
    real = nsys_reader._scan

    def spy(*a):
        out = real(*a)
        seen.append(out and out[0])
        return out

    monkeypatch.setattr(nsys_reader, "_scan", spy)
    scanned = nsys_extract.extract(path)
    monkeypatch.setattr(nsys_reader, "_scan", lambda *a: None)
    copied = nsys_extract.extract(path)
    monkeypatch.setattr(nsys_reader, "_scan", real)
    return scanned, copied, seen


def _frame(df, key=None):
    df = df.astype(str)
    return df.sort_values(key or list(df.columns)).reset_index(drop=True)


def _same(a, b, gaps: bool = True):
    """a and b the same extract; gaps=False: b took the DuckDB route, which keeps no kernel names
    in the gaps (nsyscomm/ingest/nsys/gap_kernels.py)."""
    assert a.calls.schema == b.calls.schema  # names, order and Arrow types
    assert _frame(a.calls.to_pandas()).equals(_frame(b.calls.to_pandas()))
    assert _frame(a.markers).equals(_frame(b.markers))
    assert _frame(a.spans).equals(_frame(b.spans))
    assert a.spans.dtypes.equals(b.spans.dtypes)
    assert a.warnings == b.warnings
    assert (a.session_start_utc_ns, a.nsys_version) == (b.session_start_utc_ns, b.nsys_version)
    assert (a.links is None) == (b.links is None)
    # what the late-arrival diagnosis reads: the host's activity and the kernels in each gap
    if not gaps:
        assert b.gap_kernels is None and b.gap_kernel_names is None
    for attr in ("host_calls", "host_ranges") + (("gap_kernels", "gap_kernel_names") if gaps else ()):
        x, y = getattr(a, attr), getattr(b, attr)
        assert (x is None) == (y is None), attr
        if x is not None:
            assert _frame(x).equals(_frame(y)), attr


def _reports():
    out = [p for p in sorted(SAMPLES.rglob("*.sqlite"))]
    return out + real_nsys_files()


@needs_scan
@pytest.mark.parametrize("path", _reports(), ids=lambda p: p.name)
def test_same_extract_as_the_copy(path, monkeypatch):
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen and seen[0] is not None, "the C scan was not used"
    _same(scanned, copied)


@needs_scan
@pytest.mark.parametrize("ranges", [False, True], ids=["wrapper_only", "own_ranges"])
def test_long_ranges_counted_for_the_host_ranges_pass(tmp_path, ranges, monkeypatch):
    """The scan counts the NVTX ranges sql/host_ranges_nsys.sql could keep, so that a report with
    none skips that pass: the wrapper's long collective ranges and a marker are not counted; the
    program's own ranges are, and come out as the query gives them."""
    from tests.support import late_jobs as lj

    path = lj.write_chain_job(tmp_path, osrt=True, ranges=ranges)
    opened = nsys_reader.open_report(path)
    try:
        assert opened.long_ranges == (5 if ranges else 0)  # a train_step per rank, one load_batch
    finally:
        opened.con.close()
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen and seen[0] is not None
    _same(scanned, copied)
    names = sorted(scanned.host_ranges["name"]) if len(scanned.host_ranges) else []
    assert names == (sorted(["train_step"] * 4 + [lj.LOAD_RANGE]) if ranges else [])


def _copy(tmp_path, src=FSDP) -> Path:
    dst = tmp_path / "report.sqlite"
    shutil.copy(src, dst)
    return dst


def _edit(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()


def _loosen(path: Path, *tables: str) -> None:
    """The tables again without their NOT NULL constraints (CREATE TABLE AS keeps the columns'
    types), for NULLs where nsys writes values."""
    for t in tables:
        _edit(path, f"CREATE TABLE loose AS SELECT * FROM {t}", f"DROP TABLE {t}", f"ALTER TABLE loose RENAME TO {t}")


def test_wrapper_messages_inline_or_registered_give_the_same_calls(tmp_path, monkeypatch):
    """The wrapper registers its messages (NVTX_EVENTS.textId); other emitters of the same format
    may write them inline (NVTX_EVENTS.text): with half of them inline, the same calls, through
    either path."""
    path = _copy(tmp_path)
    _edit(
        path,
        "UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds s WHERE s.id = textId), textId = NULL "
        "WHERE rowid % 2 = 0 AND textId IN (SELECT id FROM StringIds WHERE value LIKE 'nsyscomm:%')",
    )
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'nsyscomm:%'").fetchone()[0] > 50
    con.close()
    registered = nsys_extract.extract(FSDP, report="report.sqlite")
    if _sqlite_scan is not None:
        scanned, copied, _ = _extract_both(path, monkeypatch)
        _same(registered, scanned)
    else:
        copied = nsys_extract.extract(path)
    _same(registered, copied)


@needs_scan
def test_same_extract_with_nulls_duplicates_and_near_misses(tmp_path, monkeypatch):
    """What damaged or unusual exports hold: NULLs where nsys writes values, a launch row twice,
    names that nearly match, events that are no ranges."""
    path = _copy(tmp_path)
    _loosen(path, "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    _edit(
        path,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid % 17 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = NULL WHERE rowid % 23 = 0",
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE rowid % 29 = 0',
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = NULL WHERE rowid % 7 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE rowid % 13 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid % 19 = 0",
        'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = NULL WHERE rowid % 11 = 0',
        # a launch written twice: its kernel joins both, in either path
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "WHERE r.rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN "
        "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL))",
        'UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid % 11 = 0',
        "UPDATE NVTX_EVENTS SET globalTid = NULL WHERE rowid % 31 = 0",
        "INSERT INTO StringIds (id, value) VALUES (990001, 'not a name that matters')",
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId) '
        'SELECT start, "end", 59, globalTid, 990001 FROM NVTX_EVENTS WHERE rowid = 1',
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text) '
        "SELECT start + 1, \"end\", 59, globalTid, 'ncclAllReduce' FROM NVTX_EVENTS WHERE rowid = 2",
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text) '
        "SELECT start + 1, \"end\", 59, globalTid, 'NCCL:all_reduce (case differs)' FROM NVTX_EVENTS WHERE rowid = 3",
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text) '
        "SELECT start - 5, \"end\", 75, globalTid, 'nsyscomm:all_reduce|not a range' FROM NVTX_EVENTS WHERE rowid = 4",
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text) '
        "SELECT start, NULL, 34, globalTid, 'gloo:mark \u00e9\u4e2d\U0001f600' FROM NVTX_EVENTS WHERE rowid = 5",
    )
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen[0] is not None
    _same(scanned, copied)
    assert any("without a start time or thread" in w for w in scanned.warnings)


def _variant(i: int, m: str) -> str:
    """The i-th way to write wrapper message m: the wrapper's own layout and what the C split
    leaves to the SQL (values that are no plain integers or overflow, other field orders,
    missing or extra fields, callers holding '|', '=' or '|caller=')."""
    head, _, caller = m.partition("|caller=")
    f = dict(x.split("=", 1) for x in head.split("|")[1:])
    op = head.split("|")[0]

    def put(**kw):
        g = {**f, **kw}
        return (
            op
            + "".join(
                f"|{k}={g[k]}"
                for k in ("api", "bytes", "dtype", "numel", "pg", "gsize", "granks", "seq", "async", "step")
            )
            + (f"|peer={g['peer']}" if "peer" in g else "")
        )

    return [
        m,
        put(bytes="+12") + f"|caller={caller}",
        put(bytes=" 12", numel="7 ") + f"|caller={caller}",
        put(bytes="99999999999999999999") + f"|caller={caller}",
        put(bytes="1234567890123456789", numel="-5") + f"|caller={caller}",
        put(gsize="3000000000", peer="2147483648") + f"|caller={caller}",
        put(gsize="-7", peer="-1") + "|caller=",
        put(api="", bytes="", dtype="", numel="", pg="", gsize="", granks="", seq="", step=""),
        put(seq="abc", step="1.5", bytes="1e3") + f"|caller={caller}",
        put(peer="3") + "|caller=a|b=c|caller=d\ne",
        put() + "|extra=1|caller=x",
        put() + "|",
        put(),
        op
        + f"|bytes={f['bytes']}|api={f['api']}"
        + head[len(op) + len(f"|api={f['api']}|bytes={f['bytes']}") :]
        + f"|caller={caller}",
        put(api="all_reduce_\u00e9", dtype="\u4e2d") + "|caller=train.py:1 \U0001f600",
        "nsyscomm:" + head[len(op) :] + f"|caller={caller}",
        "nsyscomm:all_reduce",
    ][i % 17]


@needs_scan
def test_messages_split_in_c_or_sql_give_the_same_calls(tmp_path, monkeypatch):
    """The C scan splits the wrapper messages in the wrapper's layout (split_message)
    and leaves the others to sql/calls_nsys.sql, which splits all of them on DuckDB's path: the
    same calls either way, for every layout of _variant (each message rewritten, inline)."""
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT e.rowid, s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE s.value LIKE 'nsyscomm:%' ORDER BY e.rowid"
    ).fetchall()
    assert len(rows) > 17 * 4
    con.executemany(
        "UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE rowid = ?",
        [(_variant(i, m), rowid) for i, (rowid, m) in enumerate(rows)],
    )
    con.commit()
    con.close()
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen[0] is not None
    _same(scanned, copied)
    calls = scanned.calls.to_pandas()
    assert (calls["bytes"] == 12).any() and calls["caller"].str.contains("\\|caller=d\n", regex=True).any()


@needs_scan
def test_scan_splits_the_wrapper_layout_only(tmp_path):
    """The NVTX scan's split of the wrapper's messages (split_message in _sqlite_scan.c): the
    fields of a message in the wrapper's layout, and no name; any other name kept whole."""
    path = tmp_path / "nvtx.sqlite"
    con = sqlite3.connect(path)
    con.execute(
        'CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, '
        "textId INTEGER, text TEXT)"
    )
    msgs = [
        "nsyscomm:send|api=send|bytes=8|dtype=float32|numel=2|pg=0|gsize=2|granks=|seq=1|async=0|step=-3"
        "|peer=1|caller=t.py:3 f|x",
        "nsyscomm:all_reduce|api=all_reduce|bytes=|dtype=|numel=|pg=|gsize=|granks=0,1|seq=0|async=1|step=",
        "nsyscomm:x|api=a|bytes=0x10|dtype=|numel=|pg=|gsize=|granks=|seq=|async=|step=|caller=",
        "nccl:all_reduce",
    ]
    con.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 1, NULL, ?)", [(i, i + 1, m) for i, m in enumerate(msgs)]
    )
    con.commit()
    con.close()
    out = _sqlite_scan.scan(
        nsys_reader.read_only_uri(path),
        None,
        1,
        0,
        None,
        1,
        0,
        scan_arrow.rows_sql("NVTX_EVENTS", "nsyscomm_range", 'start, "end", eventType, globalTid, textId, text'),
        1,
        len(msgs),
        2,
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        [],
        bytearray(1),
        100_000,
    )["nvtx"]

    def row(i):
        r = {"parsed": bool(np.frombuffer(out["parsed"][0], np.int64)[i])}
        for k in ("bytes", "numel", "gsize", "seq", "step", "peer"):
            v, ok = out[k]
            r[k] = int(np.frombuffer(v, np.int64)[i]) if ok[i] else None
        for k in ("name", "op", "api", "dtype", "pg", "granks", "caller"):
            o, d, ok = out[k]
            o = np.frombuffer(o, np.int64)
            r[k] = bytes(d[o[i] : o[i + 1]]).decode() if ok[i] else None
        return r

    assert row(0) == {
        "parsed": True,
        "bytes": 8,
        "numel": 2,
        "gsize": 2,
        "seq": 1,
        "step": -3,
        "peer": 1,
        "name": None,
        "op": "send",
        "api": "send",
        "dtype": "float32",
        "pg": "0",
        "granks": None,
        "caller": "t.py:3 f|x",
    }
    assert row(1) == {
        "parsed": True,
        "bytes": None,
        "numel": None,
        "gsize": None,
        "seq": 0,
        "step": None,
        "peer": None,
        "name": None,
        "op": "all_reduce",
        "api": "all_reduce",
        "dtype": None,
        "pg": None,
        "granks": "0,1",
        "caller": None,
    }
    for i in (2, 3):  # 0x10 is no plain integer; a PyTorch range is no message
        r = row(i)
        assert not r["parsed"] and r["name"] == msgs[i] and r["op"] is None and r["bytes"] is None


@needs_scan
def test_same_extract_without_nccl_kernels(tmp_path, monkeypatch):
    """Without NCCL kernels a kernel without a name counts as compute (SQL: NULL NOT IN (empty))."""
    path = _copy(tmp_path)
    _loosen(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    _edit(
        path,
        "UPDATE StringIds SET value = 'x' || value WHERE value LIKE 'nccl%'",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = NULL WHERE rowid % 5 = 0",
    )
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen[0] is not None and compute_columns.count(seen[0])
    _same(scanned, copied)


@needs_scan
def test_unexpected_values_take_the_copy(tmp_path, monkeypatch):
    """A value of another type than the column's: the scan steps aside and DuckDB's copy gives
    its own answer (here the one-line error about the export)."""
    path = _copy(tmp_path)
    _edit(path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1.5 WHERE rowid = 3")
    from nsyscomm import api
    from nsyscomm.errors import InputError

    assert nsys_reader._scan(*_opened_args(path)) is None
    with pytest.raises(InputError) as scanned:
        api.extract_one(path)
    monkeypatch.setattr(nsys_reader, "_scan", lambda *a: None)
    with pytest.raises(InputError) as copied:
        api.extract_one(path)
    assert str(scanned.value) == str(copied.value)


@needs_scan
def test_text_that_is_not_utf8_takes_the_copy(tmp_path, monkeypatch):
    """A range name that is not UTF-8: the scan steps aside; DuckDB's copy rejects it, and the
    extract reads a copy of the report with the bad bytes replaced (nsys_extract.extract)."""
    path = _copy(tmp_path)
    con = sqlite3.connect(path)
    con.execute(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text) '
        'SELECT start + 1, "end", 59, globalTid, CAST(? AS TEXT) FROM NVTX_EVENTS WHERE rowid = 2',
        (b"ncclBad\xff\xfe",),
    )
    con.commit()
    con.close()
    assert nsys_reader._scan(*_opened_args(path)) is None
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert seen[0] is None and seen[-1] is not None  # the copy with the bytes replaced is scanned
    _same(scanned, copied)
    assert any("not valid UTF-8" in w for w in scanned.warnings)


@needs_scan
def test_compute_kernels_kept_narrow(tmp_path, monkeypatch):
    """The scan keeps the compute kernels in 29 bytes each (int32 ids, int64 times, no validity
    arrays), held narrower still (compute_columns.narrow: the ids as their values allow, the end
    as a uint32 duration, the start as a uint32 offset), the times exact; a device id past 32
    bits makes it step aside for DuckDB's copy, with the same extract."""
    out = nsys_reader._scan(*_opened_args(FSDP))
    assert out is not None
    compute = out[0]
    wide = nsys_reader.COMPUTE_TYPES
    assert set(compute) == {"pid", "device", "name", "start_base", "start_offset", "duration"}
    assert (compute["start_offset"].dtype, compute["duration"].dtype) == (np.uint32, np.uint32)
    assert all(compute[n].itemsize < np.dtype(wide[n]).itemsize for n in ("device", "name"))
    assert compute_columns.count(compute) and (compute["name"] >= 0).all()
    with sqlite3.connect(FSDP) as db:
        times = db.execute(
            'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL '
            "WHERE shortName NOT IN (SELECT id FROM StringIds WHERE value LIKE 'nccl%') ORDER BY rowid"
        ).fetchall()
    starts = compute_columns.starts(compute)
    every = slice(0, len(starts))
    made = np.stack([starts[every], compute_columns.KernelEnds(compute, starts)[every]], axis=1)
    assert made.dtype == np.int64 and made.tolist() == [list(t) for t in times]
    path = _copy(tmp_path)
    _edit(
        path,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 << 40 WHERE rowid = (SELECT min(rowid) "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE shortName NOT IN (SELECT id FROM StringIds WHERE value LIKE 'nccl%'))",
    )
    assert nsys_reader._scan(*_opened_args(path)) is None
    scanned, copied, seen = _extract_both(path, monkeypatch)
    _same(scanned, copied)


def _opened_args(path: Path):
    from nsyscomm import duck

    con = duck.connect(sqlite=True)
    con.execute(f"ATTACH '{path}' AS r (TYPE sqlite, READ_ONLY)")
    return con, path, nsys_reader.table_columns(path), bytearray(1)


@needs_scan
def test_cancel_stops_the_scan():
    with pytest.raises(ValueError, match="cancelled"):
        _sqlite_scan.scan(
            nsys_reader.read_only_uri(FSDP),
            'SELECT start, "end", globalTid, correlationId '
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid BETWEEN ? AND ?",
            1,
            10,
            None,
            1,
            0,
            None,
            1,
            0,
            2,
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            [],
            bytearray(b"\x01"),
            100_000,
        )


def _gen():
    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_scan
def test_same_extract_over_many_chunks_and_threads(tmp_path, monkeypatch):
    """200k rows a table: several chunks of rowids per table, taken by two threads in turn."""
    path = tmp_path / "mid.sqlite"
    _gen().generate(path, ranks=4, steps=4, layers=250, quiet=True)
    _loosen(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    _edit(
        path,
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE rowid % 1001 = 0',
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid BETWEEN 70000 AND 140000",
    )  # a gap in the rowids
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert compute_columns.count(seen[0]) > 150_000
    _same(scanned, copied)


def test_path_with_uri_characters(tmp_path, monkeypatch):
    """'?', '#', '%', spaces and non-ASCII in the report's path: every SQLite connection of the
    ingest opens it by nsys_reader.read_only_uri, which keeps them part of the path."""
    odd = tmp_path / "run #1 ?50% é"
    odd.mkdir()
    path = _copy(odd)
    scanned, copied, seen = _extract_both(path, monkeypatch)
    assert _sqlite_scan is None or seen[0] is not None
    _same(scanned, copied)
    _same(scanned, nsys_extract.extract(FSDP))
