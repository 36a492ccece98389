"""The reading stage: a report's tables into DuckDB, and the head start the CLI gives a lone report."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from nsyscomm.duck import arrow_frame
from nsyscomm.errors import InputError
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import reader as nsys_reader
from tests.conftest import ROOT

SAMPLE = ROOT / "sample_reports" / "synthetic_fsdp_8rank.sqlite"


def _rows(e):
    c = arrow_frame(e.calls)
    return c.astype(str).sort_values(list(c.columns)).reset_index(drop=True)


def test_head_start_gives_the_same_extract_and_is_taken_once():
    plain = nsys_extract.extract(SAMPLE)
    nsys_reader.head_start(SAMPLE)
    assert len(nsys_reader._head_starts) == 1
    started = nsys_extract.extract(SAMPLE)
    assert not nsys_reader._head_starts
    assert _rows(plain).equals(_rows(started))
    assert (
        plain.markers.sort_values("pid")
        .reset_index(drop=True)
        .equals(started.markers.sort_values("pid").reset_index(drop=True))
    )


def test_head_start_failure_surfaces_when_taken(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    nsys_reader.head_start(other)
    with pytest.raises(InputError, match="without nsys tables"):
        nsys_extract.extract(other)
    assert not nsys_reader._head_starts


def test_untaken_head_starts_are_dropped():
    nsys_reader.head_start(SAMPLE)
    opened = nsys_reader._head_starts[nsys_reader._identity(SAMPLE)][0].result()
    nsys_reader.drop_head_starts()
    assert not nsys_reader._head_starts
    with pytest.raises(Exception, match="closed"):
        opened.con.execute("SELECT 1")


@pytest.mark.parametrize("scan", ["copy", "c"])
def test_reading_stage_does_not_import_pandas(scan):
    """Not while it reads: the CLI imports pandas meanwhile. The C scan's rows go to DuckDB
    through Arrow at the end, where DuckDB's Python client imports pandas (the CLI has by then)."""
    spy = (
        "real = nsys_reader.arrow_table; "  # after the scan, as its rows are handed over
        "nsys_reader.arrow_table = lambda *a: (seen.append('pandas' in sys.modules), real(*a))[1]; "
    )
    code = (
        "import sys; seen = []; from nsyscomm.ingest.nsys import reader as nsys_reader; from nsyscomm.extract import cache; from nsyscomm import duck; "
        + ("nsys_reader._scan = lambda *a: None; " if scan == "copy" else spy)
        + f"o = nsys_reader.open_report(__import__('pathlib').Path({str(SAMPLE)!r})); "
        "n = o.con.execute('SELECT count(*) FROM src_kernels').fetchone()[0]; "
        "print(n, seen[0] if seen else 'pandas' in sys.modules, o.compute is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 0 and out[1] == "False"
    assert out[2] == str(scan == "c" and nsys_reader.sqlite_scan_module() is not None)


def test_cli_lone_report_with_and_without_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = nsys_reader.head_start
    monkeypatch.setattr(nsys_reader, "head_start", lambda p: calls.append(p) or real(p))
    run = CliRunner().invoke
    args = ["summarize", str(SAMPLE), "--format", "json"]
    first = run(main, args)  # head start, then stored in the cache
    again = run(main, args)  # cached: no head start
    fresh = run(main, args + ["--no-cache"])
    assert first.exit_code == again.exit_code == fresh.exit_code == 0
    assert json.loads(first.stdout) == json.loads(again.stdout) == json.loads(fresh.stdout)
    assert len(calls) == 2 and not nsys_reader._head_starts


def test_dropping_a_running_head_start_stops_and_closes_it():
    nsys_reader.head_start(SAMPLE)
    started, con, _ = next(iter(nsys_reader._head_starts.values()))
    nsys_reader.drop_head_starts()  # interrupts it if it still runs, then closes it
    assert not nsys_reader._head_starts and started.done()
    with pytest.raises(Exception, match="closed"):
        con.execute("SELECT 1")


@pytest.mark.parametrize("error", ["InterruptException", "RuntimeError"])
def test_duckdb_stopped_by_ctrl_c_is_an_interruption(error, capsys):
    import duckdb

    from nsyscomm.commands import guard

    exc = (
        duckdb.InterruptException("INTERRUPT Error: Interrupted!")
        if error == "InterruptException"
        else RuntimeError("Query interrupted")
    )

    def fail():
        raise exc

    with pytest.raises(SystemExit) as stop:
        guard(fail)
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == "nsyscomm: interrupted"


def test_ctrl_c_inside_a_scan_of_python_data_is_an_interruption(capsys):
    """Ctrl-C while DuckDB calls Python (scanning registered pandas or Arrow data) reaches us as a
    duckdb.Error that wraps the KeyboardInterrupt: the same one line and status 130."""
    import duckdb
    import pyarrow as pa

    from nsyscomm.commands import guard

    def batches():
        yield pa.record_batch([pa.array([1, 2])], names=["x"])
        raise KeyboardInterrupt

    con = duckdb.connect()
    con.register("reader", pa.RecordBatchReader.from_batches(pa.schema([("x", pa.int64())]), batches()))
    with pytest.raises(SystemExit) as stop:
        guard(lambda: con.execute("SELECT sum(x) FROM reader").fetchall())
    assert stop.value.code == 130
    assert capsys.readouterr().err.strip() == "nsyscomm: interrupted"
