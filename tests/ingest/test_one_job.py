"""Folders that never mislead: every file of a folder is read or named as
skipped with its reason, and reports that cannot be one job are refused (exit status 2, naming
what differs) unless --merge asks to read them as one; one report per node stays one job.
Driven through the CLI as a user runs it, on the bundled samples and on generated jobs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import SAMPLES
from tests.support import job_shapes
from tests.support.arrow_convert import convert

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"
FSDP = SAMPLES / "synthetic_fsdp_8rank.sqlite"
GLOO = SAMPLES / "synthetic_gloo_cpu.sqlite"
NODES = SAMPLES / "synthetic_nowrapper_2node"


def _run(*args) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output and r.exit_code != 3, r.output
    return r.exit_code, r.stdout, r.stderr


def _refused(stderr: str) -> str:
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("nsyscomm: error:"), stderr
    return lines[0]


def test_two_samples_in_a_folder_are_refused_naming_what_differs(tmp_path):
    """The 4-rank DDP and the 8-rank FSDP sample: not a 12-rank job with a false desync."""
    shutil.copy(DDP, tmp_path)
    shutil.copy(FSDP, tmp_path)
    code, out, err = _run("summarize", tmp_path)
    assert code == 2 and "DESYNC" not in out.upper()
    line = _refused(err)
    assert "not one job" in line and "--merge" in line
    assert "world sizes differ (4 in synthetic_ddp_4rank.sqlite, 8 in synthetic_fsdp_8rank.sqlite)" in line
    assert "rank(s) 0-3 claimed in each of synthetic_ddp_4rank.sqlite and synthetic_fsdp_8rank.sqlite" in line
    # asked for, they are read as one job as before: renumbered, loudly
    code, out, err = _run("summarize", tmp_path, "--merge", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert len(doc["ranks"]) == 12 and any("renumbered" in w for w in doc["warnings"])


def test_every_file_of_a_folder_is_read_or_named(tmp_path):
    """A sample .sqlite, an Arrow report, two .json and a .txt: the Arrow report is read too (it
    was dropped without a word), so the two jobs are refused; with --merge both are read and
    the other files are named with the reason they are not read (nsyscomm's own summary in JSON
    only)."""
    shutil.copy(DDP, tmp_path)
    convert(GLOO, tmp_path / "report.arrow")
    (tmp_path / "summary.json").write_text(json.dumps({"schema": 3, "tool": "nsyscomm", "summary": []}))
    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.1}))
    (tmp_path / "notes.txt").write_text("what I ran\n")
    code, _, err = _run("summarize", tmp_path)
    assert code == 2
    line = _refused(err)
    assert "report.arrow" in line and "synthetic_ddp_4rank.sqlite" in line
    code, out, _ = _run("summarize", tmp_path, "--merge", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and sorted(doc["reports"]) == ["report.arrow", "synthetic_ddp_4rank.sqlite"]
    skipped = {Path(s["file"]).name: s["reason"] for s in doc["skipped"]}
    assert skipped == {
        "notes.txt": "not a report",
        "config.json": "JSON, but not a PyTorch profiler trace",
        "summary.json": "nsyscomm's own output",
    }
    code, out, _ = _run("summarize", tmp_path, "--merge")
    assert code == 0
    assert "not read (not a report):" in out and "notes.txt" in out and "config.json" in out
    assert "summary.json" not in out  # nsyscomm's own: not news to the user


def test_one_report_per_node_is_one_job(tmp_path):
    """Disjoint ranks, other hosts, nsys sessions started seconds apart: one job, no warning
    about ranks."""
    job_shapes.loop(tmp_path, nodes=2, per_node=2, session_offsets_ns=(0, 4 * 10**9))
    code, out, err = _run("summarize", tmp_path, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    assert {r["host"] for r in doc["ranks"]} == {"node-0", "node-1"}
    assert not any("renumbered" in w or "marker" in w for w in doc["warnings"]), doc["warnings"]
    code, _, err = _run("summarize", NODES)  # no wrapper markers: ranks in process order, as before
    assert code == 0, err


def test_runs_an_hour_apart_are_refused(tmp_path):
    """Two halves of one job's shape (disjoint ranks, one world size) recorded an hour apart:
    their processes never ran together."""
    job_shapes.loop(tmp_path, nodes=1, per_node=2, world=4, names=("a.sqlite",))
    job_shapes.loop(
        tmp_path, nodes=1, per_node=2, world=4, first_rank=2, names=("b.sqlite",), session_offsets_ns=(3600 * 10**9,)
    )
    code, _, err = _run("summarize", tmp_path)
    line = _refused(err)
    assert code == 2 and "a.sqlite ended at" in line and "b.sqlite began at" in line, line
    assert _run("summarize", tmp_path, "--merge")[0] == 0


def test_more_processes_than_the_world_are_refused(tmp_path):
    """Two unmarked node reports beside a marked 2-rank job: 6 processes in a world of 2."""
    code, _, err = _run("summarize", NODES, GLOO)
    assert code == 2 and "6 processes made calls, but the world size is 2" in _refused(err)


def test_a_report_exported_twice_is_read_once(tmp_path):
    shutil.copy(DDP, tmp_path / "report.sqlite")
    convert(DDP, tmp_path / "report.arrow")
    code, out, err = _run("summarize", tmp_path, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["reports"] == ["report.sqlite"] and len(doc["ranks"]) == 4
    assert [(Path(s["file"]).name, s["reason"]) for s in doc["skipped"]] == [
        ("report.arrow", "the same report as report.sqlite, which is read")
    ]


def test_commands_without_input_show_one_sample_job(tmp_path):
    """With no input, trace/report read one bundled sample job, not all samples merged."""
    code, out, err = _run("trace", "-o", "-")
    assert code == 0, err
    ranks = {e["pid"] for e in json.loads(out)["traceEvents"] if e.get("ph") == "X"}
    assert len(ranks) == 4


def test_every_command_refuses_two_jobs_and_merges_on_request(tmp_path):
    """The refusal's advice holds wherever it is given: every command that reads reports takes
    --merge."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(DDP, jobs)
    shutil.copy(GLOO, jobs)
    out = tmp_path / "out"  # beside the input folder: an output inside it would be read back
    for cmd in (
        ["summarize", jobs],
        ["trace", jobs, "-o", out / "t.json"],
        ["report", jobs, "-o", out / "r.html"],
        ["export", "--format", "whatif", out / "w", jobs],
    ):
        code, _, err = _run(*cmd)
        assert code == 2 and "--merge" in _refused(err), cmd
        code, _, err = _run(*cmd, "--merge")
        assert code == 0, (cmd, err)
