"""Outputs are written whole or not at all: never over an input (the same file by another name, a
symlink, a hard link), never into an input folder where they would be read back, never over a
default name the user did not give, and a full disk leaves the old file as it was."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import SAMPLES

GLOO = SAMPLES / "synthetic_gloo_cpu.sqlite"
DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"


def _cli(*args: str | os.PathLike, cwd: Path | None = None):
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(main, [os.fspath(a) for a in args])
    finally:
        os.chdir(old)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _tree(d: Path) -> dict[str, str]:
    return {str(f.relative_to(d)): _digest(f) for f in sorted(d.rglob("*")) if f.is_file()}


@pytest.fixture
def report(tmp_path) -> Path:
    return Path(shutil.copy(GLOO, tmp_path / "x.sqlite"))


def _refused(r, *names: str) -> None:
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line, r.output
    for n in names:
        assert n in line, (n, line)


@pytest.mark.parametrize("cmd", ["report", "trace"])
@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_an_output_that_is_the_input_is_refused(tmp_path, report, cmd, how):
    before = _digest(report)
    out = report
    if how == "symlink":
        out = tmp_path / "link.sqlite"
        out.symlink_to(report.name)
    elif how == "hardlink":
        out = tmp_path / "hard.sqlite"
        os.link(report, out)
    r = _cli(cmd, report, "-o", out)
    _refused(r, out.name, report.name)
    assert _digest(report) == before


def test_baseline_and_junit_onto_an_input_are_refused(tmp_path, report):
    before = _digest(report)
    _refused(_cli("baseline", report, "--output", report), "x.sqlite")
    base = tmp_path / "base.json"
    assert _cli("baseline", report, "--output", base).exit_code == 0
    _refused(_cli("gate", report, "-b", base, "--junit", report), "x.sqlite", "--junit")
    _refused(_cli("gate", report, "-b", base, "--output", base), "base.json")
    assert _digest(report) == before


def test_an_output_inside_an_input_folder_that_would_be_read_back_is_refused(tmp_path, report):
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(GLOO, d / "r0.sqlite")
    _refused(_cli("report", d, "-o", d / "r.sqlite"), "r.sqlite", "input folder")
    assert _tree(d) == {"r0.sqlite": _digest(GLOO)}
    # nsyscomm's own HTML and traces are marked and never read back: writing them there is fine
    assert _cli("report", d, "-o", d / "r.html").exit_code == 0
    assert _cli("trace", d, "-o", d / "t.json", "--per-rank", d / "ranks").exit_code == 0
    assert _cli("summarize", d).exit_code == 0


def test_export_into_its_input_folder_is_refused(tmp_path):
    d = tmp_path / "d"
    assert _cli("export", d, DDP).exit_code == 0
    before = _tree(d)
    _refused(_cli("export", d, d), "d")
    _refused(_cli("export", d / "sub", d), "input folder")
    assert _tree(d) == before
    assert _cli("summarize", d).exit_code == 0  # still one job


@pytest.mark.parametrize("cmd,default", [("trace", "trace.json"), ("report", "report.html")])
def test_a_default_name_that_exists_is_not_replaced(tmp_path, report, cmd, default):
    mine = tmp_path / default
    mine.write_text("mine\n")
    r = _cli(cmd, report, cwd=tmp_path)
    _refused(r, default, "-o")
    assert mine.read_text() == "mine\n"
    assert _cli(cmd, report, "-o", default, cwd=tmp_path).exit_code == 0  # named: replaced
    assert mine.read_text() != "mine\n"


def _disk_full(monkeypatch, code: int = errno.ENOSPC) -> None:
    """Every fsync fails as it does when the file system is full: the data was not all written."""

    def full(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", full)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_leaves_the_old_baseline_as_it_was(tmp_path, report, monkeypatch, code):
    base = tmp_path / "b.json"
    assert _cli("baseline", report, "--output", base).exit_code == 0
    before = base.read_bytes()
    _disk_full(monkeypatch, code)
    r = _cli("baseline", report, "--append", "--output", base)
    _refused(r, "b.json")
    assert base.read_bytes() == before
    json.loads(before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "x.sqlite"]  # no temporary left


def test_a_full_disk_writes_no_partial_trace_report_or_export(tmp_path, report, monkeypatch):
    _disk_full(monkeypatch)
    _refused(_cli("trace", report, "-o", tmp_path / "t.json"), "t.json", "space")
    _refused(_cli("report", report, "-o", tmp_path / "r.html"), "r.html", "space")
    _refused(_cli("export", tmp_path / "e", DDP), "e", "space")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sqlite"]


def test_a_full_disk_leaves_the_step_summary_as_it_was(tmp_path, report, monkeypatch):
    base = tmp_path / "base.json"
    assert _cli("baseline", report, "--output", base).exit_code == 0
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    def short_write(fd, data):  # a few bytes land, then the disk is full
        if fd > 2:
            os.lseek(fd, 0, os.SEEK_END)
            real_write(fd, bytes(data[:5]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    real_write = os.write
    monkeypatch.setattr(os, "write", short_write)
    r = _cli("gate", report, "-b", base)
    assert r.exit_code == 0, r.output
    assert "GITHUB_STEP_SUMMARY" in r.output
    assert summary.read_text() == "# earlier step\n"
