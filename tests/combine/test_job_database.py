"""A large job's database is a file in a folder of its process's own under the temporary base
(nsyscomm.temp_folders), and nothing of it outlives the process, however it ends: a summary that
succeeds, one that fails (exit 2, exit 3), Ctrl-C, SIGTERM; a process killed outright leaves its
folder to the next one, which removes it. The outputs are the same as from a database in memory.

The commands run in a child process with FILE_CALLS set to 0 (every job's database a file) and a
step of the job stage (begin_overlap) replaced: it notes the job's folder, then raises, waits
for a signal or goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import nsyscomm
from nsyscomm import temp_folders
from tests.conftest import ROOT, sample

# how long a child may take to start, read a sample and reach the job stage on a loaded machine
READY_WITHIN_S = 120

_CHILD = """
import sys, time
from nsyscomm import temp_folders
from nsyscomm.combine import calls, job
from nsyscomm.errors import InputError
calls.FILE_CALLS = 0
what = sys.argv.pop(1)
made = temp_folders.job_folder
def job_folder():
    path = made()
    print(path, flush=True)
    return path
temp_folders.job_folder = job_folder
overlap = job.begin_overlap
def begin_overlap(con):
    if what == "input":
        raise InputError("not a report of a job: made up by the test")
    if what == "internal":
        raise RuntimeError("a defect made up by the test")
    if what == "wait":
        print("ready", flush=True)
        time.sleep(600)
    return overlap(con)
job.begin_overlap = begin_overlap
from nsyscomm.__main__ import entry  # the program as its console script runs it
entry()
"""


def _child(what: str, report: Path, tmp: Path) -> subprocess.Popen:
    """summarize REPORT --format json in a child whose temporary base is tmp/base; its stdout
    (the job folder's path, "ready", the JSON) piped, its stderr to tmp/err."""
    path = os.pathsep.join(dict.fromkeys([str(Path(nsyscomm.__file__).parents[1]), str(ROOT)]))
    (tmp / "base").mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=path, NSYSCOMM_TEMP_DIR=str(tmp / "base"))
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, what, "summarize", str(report), "--format", "json", "--no-cache"],
        stdout=subprocess.PIPE,
        stderr=(tmp / "err").open("w"),
        env=env,
        cwd=tmp,
        text=True,
    )


def _left(tmp: Path) -> list[str]:
    return sorted(os.listdir(tmp / "base"))


@pytest.mark.parametrize(("what", "status"), [("go", 0), ("input", 2), ("internal", 3)])
def test_the_job_folder_is_gone_after_the_summary(tmp_path, what, status):
    report = sample("synthetic_ddp_4rank.sqlite")
    proc = _child(what, report, tmp_path)
    out, _ = proc.communicate(timeout=READY_WITHIN_S)
    lines = out.splitlines()
    err = (tmp_path / "err").read_text()
    assert proc.returncode == status, err
    folder = Path(lines[0])
    assert folder.parent == tmp_path / "base" and folder.name.startswith(
        f"nsyscomm-job-{temp_folders._host()}-{proc.pid}-"
    )
    assert not folder.exists()
    assert _left(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == ["base", "err"]  # nothing in the current folder
    if status:
        assert len(err.splitlines()) == 1, err
    else:
        assert json.loads("\n".join(lines[1:]))["schema"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_job_folder_outlives_no_signal(tmp_path, monkeypatch, sig):
    """Ended by a signal in the job stage: SIGTERM (143) and Ctrl-C (130) remove the folder on
    the way out; SIGKILL leaves it, and the next process to open a database removes it."""
    proc = _child("wait", sample("synthetic_ddp_4rank.sqlite"), tmp_path)
    try:
        assert proc.stdout is not None
        folder = Path(proc.stdout.readline().strip())
        assert proc.stdout.readline().strip() == "ready", (tmp_path / "err").read_text()
        assert (folder / "job.duckdb").is_file()
        proc.send_signal(sig)
        proc.wait(timeout=READY_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig == signal.SIGKILL:
        assert folder.exists()
        monkeypatch.setenv("NSYSCOMM_TEMP_DIR", str(tmp_path / "base"))
        temp_folders.sweep.cache_clear()
        try:
            temp_folders.sweep()
        finally:
            temp_folders.sweep.cache_clear()
    else:
        assert proc.returncode == (143 if sig == signal.SIGTERM else 130), (tmp_path / "err").read_text()
        assert (tmp_path / "err").read_text().strip() in ("nsyscomm: terminated", "nsyscomm: interrupted")
    assert not folder.exists()
    assert _left(tmp_path) == []


def test_sweep_removes_the_folders_of_ended_processes_only(tmp_path, monkeypatch):
    """Of this machine's, whatever the user's temporary folder holds beside them."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    live = os.getppid()
    host = temp_folders._host()
    names = [  # the first two go: their process has ended
        f"nsyscomm-job-{host}-{ended.pid}-0",
        f"nsyscomm-spill-{host}-{ended.pid}-3",
        f"nsyscomm-job-{host}-{live}-1",
        f"nsyscomm-spill-{host}-{os.getpid()}-2",
        f"nsyscomm-job-other-{host}-{ended.pid}-0",  # another machine's (a shared folder)
        f"nsyscomm-cache-{host}-{ended.pid}-0",
        f"nsyscomm-job-{host}-{ended.pid}",
    ]
    for n in names:
        (tmp_path / n).mkdir()
        (tmp_path / n / "job.duckdb").write_bytes(b"x")
    monkeypatch.setenv("NSYSCOMM_TEMP_DIR", str(tmp_path))
    temp_folders.sweep.cache_clear()
    try:
        temp_folders.sweep()
    finally:
        temp_folders.sweep.cache_clear()
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:])


def test_a_job_database_in_a_file_gives_the_same_result(monkeypatch, tmp_path):
    """The same JSON from the job's database in memory and in a file, on a sample with
    point-to-point calls, calls matched by order and several reports; the file's folder goes
    with the Result."""
    from nsyscomm.api import load
    from nsyscomm.combine import calls
    from nsyscomm.views.json_out import dumps

    monkeypatch.setenv("NSYSCOMM_TEMP_DIR", str(tmp_path))
    for name in ("synthetic_fsdp_8rank.sqlite", "synthetic_nowrapper_2node"):
        report = sample(name)
        in_memory = dumps(load([report], cache=False))
        monkeypatch.setattr(calls, "FILE_CALLS", 0)
        result = load([report], cache=False)
        (folder,) = os.listdir(tmp_path)
        assert (tmp_path / folder / "job.duckdb").is_file()
        assert dumps(result) == in_memory
        del result
        assert os.listdir(tmp_path) == []
        monkeypatch.undo()
        monkeypatch.setenv("NSYSCOMM_TEMP_DIR", str(tmp_path))
