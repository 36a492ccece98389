"""`nsyscomm run`'s output folder is one run's alone: a folder that holds a run is refused, two runs
at once cannot share one, each run imports and exports its own capture only, the run log says what
happened, and the folders made for the job are the job's user's alone.

Most tests run the launcher against a stand-in nsys (a script that runs the command and writes a
small file for each capture and export): the folder's handling, without nsys's minute. The end of
the file runs the real nsys on a 2-rank gloo job (skipped without nsys and torchrun).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nsyscomm.capture import run_folder
from nsyscomm.capture.post import StageLog, import_and_export
from nsyscomm.errors import InputError

# the stand-in nsys: --version, profile (runs the command, writes BASE.nsys-rep) and export
# (writes OUT, or fails with FAKE_NSYS_EXPORT_RC)
FAKE_NSYS = textwrap.dedent(
    """\
    #!{python}
    import os, subprocess, sys
    a = sys.argv[1:]
    if a[:1] == ["--version"]:
        print("NVIDIA Nsight Systems version 2022.4.2.1-df9881f")
    elif a[:1] == ["profile"]:
        base = a[a.index("-o") + 1]
        cmd = a[a.index("-f") + 2:]
        rc = subprocess.call(cmd)
        with open(base + ".nsys-rep", "w") as f:
            f.write("capture of " + " ".join(cmd))
        sys.exit(rc)
    elif a[:1] == ["export"]:
        rc = int(os.environ.get("FAKE_NSYS_EXPORT_RC", "0"))
        if rc:
            print("export went wrong", file=sys.stderr)
            sys.exit(rc)
        out, rep = a[a.index("-o") + 1], a[-1]
        with open(out, "w") as f:
            f.write("export of " + open(rep).read())
    """
)


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch) -> Path:
    p = tmp_path / "bin" / "nsys"
    p.parent.mkdir()
    p.write_text(FAKE_NSYS.format(python=sys.executable))
    p.chmod(0o755)
    monkeypatch.setenv("NSYSCOMM_NSYS", str(p))
    monkeypatch.delenv("FAKE_NSYS_EXPORT_RC", raising=False)
    return p


# the nsyscomm command as installed (its entry point), not `python -m nsyscomm.cli`: there the
# module is __main__, and Python shows the DeprecationWarnings of its imports
NSYSCOMM = [sys.executable, "-c", "import sys; from nsyscomm.cli import entry; sys.argv[0] = 'nsyscomm'; entry()"]


def _cli(args, timeout=120, **kw):
    return subprocess.run([*NSYSCOMM, *map(str, args)], capture_output=True, text=True, timeout=timeout, **kw)


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_second_run_into_a_used_folder_is_refused_and_the_first_kept(fake_nsys, tmp_path):
    from nsyscomm.capture.launcher import run

    out = tmp_path / "out"
    first = run([sys.executable, "-c", "print('first')"], output=str(out), export="sqlite")
    assert first.exit_code == 0 and [p.name for p in first.reports] == ["report.sqlite"], first.warnings
    before = _snapshot(out)
    r = _cli(["run", "-o", out, "--no-summary", "--", sys.executable, "-c", "print('job two ran')"])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "--output" in lines[0], r.stderr
    assert "already holds a run" in lines[0]
    assert "job two ran" not in r.stdout + r.stderr  # the command never ran
    assert _snapshot(out) == before  # nothing of the first run changed, nothing written beside it


def test_a_folder_with_a_capture_left_by_nsys_is_refused(fake_nsys, tmp_path):
    """A capture there (a run that was killed, or nsys run by hand) is another run's."""
    from nsyscomm.capture.launcher import run

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.qdstrm").write_text("someone else's capture")
    with pytest.raises(InputError, match="already holds a run \\(report.qdstrm\\)"):
        run([sys.executable, "-c", "pass"], output=str(out))
    assert sorted(p.name for p in out.iterdir()) == ["report.qdstrm"]


def test_an_empty_or_unrelated_folder_is_used(fake_nsys, tmp_path):
    from nsyscomm.capture.launcher import run

    out = tmp_path / "out"
    out.mkdir()
    (out / "train.py").write_text("# the user's\n")
    res = run([sys.executable, "-c", "pass"], output=str(out), export="arrow")
    assert res.exit_code == 0 and [p.name for p in res.reports] == ["report.arrow"], res.warnings


JOB_WAITS = textwrap.dedent(
    """\
    import os, sys, time
    open(sys.argv[1], "w").close()
    deadline = time.time() + 120  # bounded even if the test never lets it go
    while not os.path.exists(sys.argv[2]) and time.time() < deadline:
        time.sleep(0.05)
    print("job done")
    """
)


def test_a_run_while_another_runs_in_the_folder_is_refused(fake_nsys, tmp_path):
    """The first run holds the folder while its job runs; a second run into it is refused at once,
    and the first ends with its own capture exported."""
    job = tmp_path / "job.py"
    job.write_text(JOB_WAITS)
    out, ready, go = tmp_path / "out", tmp_path / "ready", tmp_path / "go"
    a = subprocess.Popen(
        [*NSYSCOMM, "run", "-o", str(out), "--no-summary", "--"] + [sys.executable, str(job), str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 90
        while not ready.exists() and a.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert ready.exists(), "the first run's job did not start"
        b = _cli(["run", "-o", out, "--no-summary", "--", sys.executable, "-c", "print('second job')"])
        go.touch()
        a_out, a_err = a.communicate(timeout=120)
    finally:
        go.touch()
        if a.poll() is None:
            a.kill()
            a.communicate()
    assert b.returncode == 2, b.stderr
    lines = b.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another nsyscomm run" in lines[0] and str(out) in lines[0], b.stderr
    assert f"pid {a.pid}" in lines[0] and "--output" in lines[0]
    assert a.returncode == 0, a_err
    # the first run's capture and export, of its own job
    assert (out / "report.arrow").read_text() == f"export of capture of {sys.executable} {job} {ready} {go}"
    assert "second job" not in (out / "report.arrow").read_text()


def test_two_runs_started_together_never_share_the_folder(fake_nsys, tmp_path):
    """Started at the same moment: one run gets the folder; the other is refused (in use, or
    holding a run once the first has begun) and leaves no capture of its own there."""
    out = tmp_path / "out"
    cmds = [
        [*NSYSCOMM, "run", "-o", str(out), "--no-summary", "--export", "sqlite", "--"]
        + [sys.executable, "-c", f"print('job {k}')"]
        for k in (1, 2)
    ]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    results = [(p, *p.communicate(timeout=120)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [(p.returncode, err) for p, _, err in results]
    winner = next(k for k, (p, _, _) in enumerate(results, 1) if p.returncode == 0)
    assert (out / "report.sqlite").read_text().endswith(f"print('job {winner}')")
    refused = next(err for p, _, err in results if p.returncode == 2)
    assert len(refused.strip().splitlines()) == 1 and str(out) in refused, refused


def test_the_lock_is_released_with_the_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with run_folder.claimed(out):
        with pytest.raises(InputError, match="in use by another nsyscomm run"):
            with run_folder.claimed(out):
                pass
    with run_folder.claimed(out):  # released: an empty folder is free again
        pass


def _fake_capture(out: Path, stem: str) -> None:
    (out / f"{stem}.nsys-rep").write_text(f"capture {stem}")


def test_a_run_exports_its_own_captures_only(fake_nsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for stem in ("report.rank0", "report.rank1", "other"):
        _fake_capture(out, stem)
    got = import_and_export(out, str(fake_nsys), [], export="sqlite", base="report")
    assert [p.name for p in got] == ["report.rank0.sqlite", "report.rank1.sqlite"]
    assert not (out / "other.sqlite").exists()


def test_the_run_log_says_when_an_export_failed(fake_nsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_RC", "3")
    out = tmp_path / "out"
    out.mkdir()
    _fake_capture(out, "report")
    warnings: list[str] = []
    with StageLog(out, show=False) as log:
        got = import_and_export(out, str(fake_nsys), warnings, export="arrow", log=log)
    assert got == [] and any("nsys export failed" in w for w in warnings), warnings
    line = (out / run_folder.LOG_NAME).read_text().strip().splitlines()[-1]
    assert "export (arrow) report.nsys-rep" in line and line.endswith("failed (exit status 3)"), line
    assert not line.endswith(" ok")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_the_folders_made_for_the_job_are_private_under_a_permissive_umask(fake_nsys, tmp_path):
    from nsyscomm.capture.launcher import run

    old = os.umask(0)
    try:
        res = run([sys.executable, "-c", "pass"], output=str(tmp_path / "new" / "out"))
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.warnings
    assert _mode(res.output_dir) == 0o700
    assert _mode(res.output_dir / run_folder.RECORDS_DIR) == 0o700


def test_flight_records_made_by_the_job_are_private(tmp_path, monkeypatch):
    """A job run outside the launcher with NSYSCOMM_RECORD_DIR: its folder and rings too."""
    from nsyscomm.capture import flight_record

    records = tmp_path / "records"
    code = (
        "import os; os.umask(0)\n"
        "from nsyscomm.capture import flight_record as fr\n"
        "push, pop, raising = fr.chain(lambda m: None, lambda: None)\n"
        "push('x'); pop()\n"
    )
    env = dict(os.environ, **{flight_record.ENV_DIR: str(records)}, RANK="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    assert _mode(records) == 0o700
    rings = list(records.glob("*.ring"))
    assert rings and all(_mode(r) == 0o600 for r in rings)


def test_an_existing_output_folder_keeps_its_mode(fake_nsys, tmp_path):
    from nsyscomm.capture.launcher import run

    out = tmp_path / "shared"
    out.mkdir()
    out.chmod(0o755)
    res = run([sys.executable, "-c", "pass"], output=str(out))
    assert res.exit_code == 0 and _mode(out) == 0o755


# ---------------------------------------------------------------- the real nsys

needs_real = pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None, reason="needs nsys and torchrun on PATH"
)

GLOO_JOB = textwrap.dedent(
    """\
    import sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1024)
    for i in range(5):
        dist.all_reduce(t)
    dist.barrier()
    open(f"{sys.argv[1]}/done.{dist.get_rank()}", "w").close()
    dist.destroy_process_group()
    """
)


@needs_real
def test_real_second_run_is_refused_and_the_first_reports_its_own(tmp_path, monkeypatch):
    from tests.conftest import done_ranks, job_did_its_work, run_job

    monkeypatch.delenv("NSYSCOMM_NSYS", raising=False)
    job = tmp_path / "job.py"
    job.write_text(GLOO_JOB)
    out = tmp_path / "out"
    first = run_job(out, job, tmp_path, options=("--format", "json"), timeout=300)
    assert job_did_its_work(first.returncode, first.stderr, done_ranks(tmp_path), 2), first.stderr[-3000:]
    out = first.out
    assert _mode(out / run_folder.RECORDS_DIR) == 0o700
    log = (out / run_folder.LOG_NAME).read_text().splitlines()
    stages = [line.split(" ", 2)[1:] for line in log]
    assert [s[0] for s in stages[:1]] == ["job"] and any(s[0] == "export" for s in stages), log
    assert all(s[1].endswith(" ok") for s in stages if s[0] in ("import", "export")), log
    before = _snapshot(out)
    second = run_job(out, job, tmp_path, ranks=3, timeout=300)
    assert second.returncode == 2, second.stderr[-3000:]
    assert len(second.stderr.strip().splitlines()) == 1 and "already holds a run" in second.stderr
    assert _snapshot(out) == before
