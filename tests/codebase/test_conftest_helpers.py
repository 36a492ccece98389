"""The suite's own helpers: a check that accepts too much makes every test using it pass."""

from __future__ import annotations

from tests.conftest import TEARDOWN, done_ranks, job_did_its_work


def test_a_failed_job_needs_every_rank_s_own_record_of_its_end(tmp_path):
    note = [f"nsyscomm: 2 of 2 rank(s) ... {TEARDOWN}, and the report is complete"]
    (tmp_path / "done.0").touch()
    assert done_ranks(tmp_path) == 1
    # nsyscomm's teardown note alone is not enough: rank 1 never recorded the end of its work
    assert not job_did_its_work(1, note, done_ranks(tmp_path), 2)
    assert not job_did_its_work(0, [], done_ranks(tmp_path), 2)
    (tmp_path / "done.1").touch()
    assert job_did_its_work(1, note, done_ranks(tmp_path), 2)
    assert job_did_its_work(0, [], done_ranks(tmp_path), 2)
    assert not job_did_its_work(1, ["the job failed"], done_ranks(tmp_path), 2)


def test_run_profiled_runs_once_more_only_when_nsys_wrote_no_report(tmp_path):
    import sys

    from tests.conftest import run_profiled

    # a stand-in for `nsyscomm run -o OUT`: the first run's nsys "writes no report"
    code = (
        "import pathlib, sys; out = pathlib.Path(sys.argv[2]); out.mkdir(); "
        "first = not list(out.parent.glob('*-again')) and out.name == 'o'; "
        "first and __import__('time').sleep(4); "
        "print('nsyscomm: warning: no report was written in ' + str(out) if first else 'ok', file=sys.stderr)"
    )
    r = run_profiled([sys.executable, "-c", code, "-o", tmp_path / "o"], capture_output=True, text=True)
    assert r.stderr.strip() == "ok" and (tmp_path / "o").is_dir() and (tmp_path / "o-again").is_dir()
    # the attempt kept, timed alone: the first one's 4 s are not counted
    assert r.out == tmp_path / "o-again" and r.seconds < 4
    bad = "import sys; print('the job failed', file=sys.stderr); sys.exit(1)"
    r = run_profiled([sys.executable, "-c", bad, "-o", tmp_path / "b"], capture_output=True, text=True)
    assert r.returncode == 1 and not (tmp_path / "b-again").exists() and r.out == tmp_path / "b"


def test_a_job_s_command_line_is_nsyscomm_run_of_torchrun(tmp_path):
    from tests.conftest import run_job_cmd

    cmd = run_job_cmd(tmp_path / "o", tmp_path / "job.py", "--steps", 3, ranks=4, options=("--format", "json"))
    assert cmd[1:] == [
        "-m",
        "nsyscomm.cli",
        "run",
        "-o",
        str(tmp_path / "o"),
        "--format",
        "json",
        "--",
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "4",
        str(tmp_path / "job.py"),
        "--steps",
        "3",
    ]
