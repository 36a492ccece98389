"""Any file name, any locale: a name whose bytes are not UTF-8 reads and writes through every
command (SQLite, DuckDB, Arrow and the cache), shown escaped; the C locale and an ASCII terminal
get their output in their own encoding, never an internal error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import ROOT, SAMPLES
from tests.support.arrow_convert import convert

GLOO = SAMPLES / "synthetic_gloo_cpu.sqlite"
DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"


def _name(d: Path, raw: bytes) -> Path:
    """d / raw, raw being bytes that are not UTF-8 (Python holds them as surrogate escapes)."""
    return d / os.fsdecode(raw)


def _cli(*args: str | os.PathLike):
    return CliRunner().invoke(main, [os.fspath(a) for a in args])


def _ok(r) -> str:
    assert r.exit_code == 0, r.output
    assert "Error" not in r.output, r.output
    return r.output


@pytest.fixture
def odd(tmp_path, monkeypatch) -> Path:
    """A folder whose name is not UTF-8, holding a report whose name is not either, and a
    cache folder whose name is not UTF-8."""
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", os.fspath(_name(tmp_path, b"cache\xf1")))
    d = _name(tmp_path, b"runs\xfe")
    d.mkdir()
    shutil.copy(GLOO, _name(d, b"rank\xff.sqlite"))
    return d


def test_a_report_named_in_no_encoding_reads_through_every_command(tmp_path, odd):
    report = _name(odd, b"rank\xff.sqlite")
    for _ in range(2):  # a fresh extract, then the cache's entry
        out = _ok(_cli("summarize", report))
        assert "rank\\xff.sqlite" in out
    _ok(_cli("summarize", "--no-cache", "--format", "json", odd))
    _ok(_cli("report", report, "-o", _name(tmp_path, b"r\xfd.html")))
    _ok(_cli("trace", odd, "-o", _name(tmp_path, b"t\xfd.json")))
    base = _name(tmp_path, b"b\xfc.json")
    assert "b\\xfc.json" in _ok(_cli("baseline", report, "-o", base))
    _ok(_cli("gate", report, "-b", base, "--junit", _name(tmp_path, b"j\xfb.xml"), "--format", "markdown"))
    r = _cli("summarize", _name(tmp_path, b"missing\xff.sqlite"))
    assert r.exit_code == 2 and "missing\\xff.sqlite" in r.output, r.output


def test_an_export_and_an_arrow_report_named_in_no_encoding(tmp_path, odd):
    out = _name(tmp_path, b"export\xfa")
    _ok(_cli("export", out, DDP))
    _ok(_cli("summarize", out))
    for raw, layout in ((b"arrow\xf9", "parquetdir"), (b"ipc\xf7", "arrowdir"), (b"a\xf8.arrow", "arrow")):
        made = convert(GLOO, tmp_path / f"made-{layout}{Path(os.fsdecode(raw)).suffix}", layout=layout)
        _ok(_cli("summarize", made.rename(_name(tmp_path, raw))))


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", *args],
        capture_output=True,
        env={**os.environ, "NSYSCOMM_CACHE_DIR": "", **env},
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize(
    "env",
    [{"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, {"PYTHONIOENCODING": "ascii"}],
    ids=["C-locale", "ascii-terminal"],
)
def test_any_locale_gets_the_summary_in_its_encoding(env):
    r = _run(env, "summarize", "--no-cache", str(GLOO))
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    r.stdout.decode("ascii")  # the terminal's encoding, every byte of it
    assert b"\\u2014" in r.stdout  # the dash the summary's headline has, as its escape
