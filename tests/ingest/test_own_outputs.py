"""nsyscomm never reads its own outputs back as reports, nor warns about them: a run folder holds
its reports beside nsyscomm's own files (the nsys command, the run log, the flight-record rings,
the lock), and users write traces, HTML reports and JSON summaries into it. Later commands on the
folder read the reports alone; JSON's `skipped` names nsyscomm's files with their reason, and the
text and HTML outputs leave them out of their notes and warnings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import sample

OWN = "nsyscomm's own output"


def _nsyscomm(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output  # the gate's 1: a regression is a verdict, not a failure
    return r.output


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run folder as `nsyscomm run` leaves it, then the outputs users write into it (the tests
    only read it)."""
    d = tmp_path_factory.mktemp("own") / "run"
    (d / "records").mkdir(parents=True)
    shutil.copy(sample("synthetic_ddp_4rank.sqlite"), d / "report.sqlite")
    (d / "nsys-command.txt").write_text("nsys profile -o report python train.py\n")
    (d / "nsyscomm-run.log").write_text("2026-11-26T10:00:00.000+00:00 job exited with status 0 after 1.00 s\n")
    (d / ".nsyscomm-run.lock").write_text("123\n")
    (d / "records" / "rank0.ring").write_bytes(b"\0" * 64)
    _nsyscomm("trace", d, "-o", d / "t.json")
    _nsyscomm("report", d, "-o", d / "r.html")
    (d / "s.json").write_text(_nsyscomm("summarize", d, "--format", "json"))
    return d


def test_later_summaries_read_the_reports_alone(run_dir):
    doc = json.loads(_nsyscomm("summarize", run_dir, "--format", "json"))
    assert doc["reports"] == ["report.sqlite"]
    skipped = {Path(s["file"]).relative_to(run_dir).as_posix(): s["reason"] for s in doc.get("skipped", [])}
    own = ["nsys-command.txt", "nsyscomm-run.log", ".nsyscomm-run.lock", "records/rank0.ring"]
    assert {k: skipped.get(k) for k in [*own, "t.json", "r.html", "s.json"]} == dict.fromkeys(
        [*own, "t.json", "r.html", "s.json"], OWN
    )
    assert not any("rank" in w and "t.json" in w for w in doc.get("warnings", []))


def test_text_and_html_do_not_warn_about_them(run_dir, tmp_path):
    text = _nsyscomm("summarize", run_dir)
    html_path = tmp_path / "again.html"
    _nsyscomm("report", run_dir, "-o", html_path)
    html = html_path.read_text()
    for name in (
        "nsys-command.txt",
        "nsyscomm-run.log",
        "rank0.ring",
        "t.json",
        "r.html",
        "s.json",
        ".nsyscomm-run.lock",
    ):
        assert name not in text, name
        assert name not in html, name


def test_the_gate_lists_the_reports_alone_as_its_input(run_dir, tmp_path):
    base = tmp_path / "base.json"
    base.write_text(_nsyscomm("summarize", sample("synthetic_ddp_4rank.sqlite"), "--format", "json"))
    md = _nsyscomm("gate", "-b", base, run_dir, "--format", "markdown")
    assert "report.sqlite" in md
    assert "t.json" not in md and "r.html" not in md and "s.json" not in md


def test_an_own_output_given_as_a_report_is_refused(run_dir):
    r = CliRunner().invoke(main, ["summarize", str(run_dir / "t.json")])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "t.json" in lines[0] and OWN in lines[0], r.output


def test_a_profiler_trace_beside_them_is_still_read(tmp_path):
    """The marker is nsyscomm's: a PyTorch profiler trace (traceEvents, no marker) is a report."""
    from nsyscomm.discover import _own_output

    kineto = tmp_path / "rank0.json"
    kineto.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [], "otherData": {"tool": "torch"}}))
    assert not _own_output(kineto)
    ours = tmp_path / "big_trace.json"  # the marker at the end of a large trace, past the first 64 KiB
    ours.write_text(json.dumps({"traceEvents": [{"name": "x" * 100}] * 2000, "otherData": {"tool": "nsyscomm"}}))
    assert _own_output(ours)


def test_a_glob_over_the_run_folder_reads_the_reports_alone(run_dir):
    doc = json.loads(_nsyscomm("summarize", f"{run_dir}/*", "--format", "json"))
    assert doc["reports"] == ["report.sqlite"]
    assert {Path(s["file"]).name for s in doc["skipped"] if s["reason"] == OWN} >= {"t.json", "r.html", "s.json"}
