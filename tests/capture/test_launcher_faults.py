"""`nsyscomm run` when things go wrong: the command crashes, one rank dies, Ctrl-C, nsys missing,
an output folder that is not writable or full. Each ends with a clear message and no lost report.

Real nsys (Debian's nsight-systems, as CI installs it) and small 2-rank gloo jobs; about a minute in total.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import run_job, run_job_cmd, run_profiled

needs_nsys = pytest.mark.skipif(
    shutil.which("nsys") is None,
    reason="nsys (Nsight Systems) is not on PATH; CI installs Debian's nsight-systems + nsight-systems-target",
)
needs_torchrun = pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")

JOB = """
import os, sys, time
import torch, torch.distributed as dist
mode = os.environ.get("JOB_MODE", "ok")
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1024)
for i in range(5):
    dist.all_reduce(t)
if mode == "crash" and rank == 0:
    raise RuntimeError("training crashed on purpose")
if mode == "crash":
    sys.exit(0)
if mode == "rank_dies" and rank == 1:
    os._exit(7)
if mode == "rank_dies":
    time.sleep(60)
if mode == "hang":
    open(os.environ["JOB_READY"] + "." + str(rank), "w").close()
    deadline = time.time() + 120   # bounded even if the interrupt never comes
    while time.time() < deadline:
        dist.all_reduce(t)
        time.sleep(0.02)
dist.barrier()  # both ranks done before either tears gloo down (docs/capture.md: teardown aborts)
dist.destroy_process_group()
"""

# The work done, then an abort in the process's teardown, after Python's exit handlers: as torch's
# gloo sometimes does when the ranks destroy the process group right after their last collective.
# Registered before torch is imported, so before nsyscomm's own exit handler: it runs after it.
TEARDOWN_JOB = """
import atexit, os
atexit.register(os.abort)
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1024)
for i in range(5):
    dist.all_reduce(t)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("job") / "job.py"
    p.write_text(JOB)
    return p


def _nsyscomm(args, env=None, timeout=180, **kw):
    return subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or dict(os.environ),
        **kw,
    )


@needs_nsys
@needs_torchrun
def test_training_crash_keeps_and_summarizes_the_report(job, tmp_path):
    out = tmp_path / "out"
    r = run_job(out, job, options=("--format", "json"), env=dict(os.environ, JOB_MODE="crash"), timeout=180)
    assert r.returncode == 1, r.stderr[-3000:]  # torchrun's status for a failed worker
    assert "the command exited with status 1" in r.stderr
    assert list(r.out.glob("*.sqlite")) + list(r.out.glob("*.arrow")), r.stderr[-2000:]
    import json

    doc = json.loads(r.stdout)
    assert doc["summary"] and doc["summary"][0]["op"] == "all_reduce"
    assert "nsyscomm/" not in r.stderr  # no traceback of ours (the job's own is fine)
    assert "failed in its teardown" not in r.stderr  # it failed in its work: a Python exception


@needs_nsys
@needs_torchrun
def test_an_abort_after_the_work_is_named_a_teardown_failure(tmp_path):
    """Every rank's program ran to its end, then a rank aborted: the launcher says the failure came
    in the teardown and the report is complete, read from the flight records."""
    job = tmp_path / "teardown_job.py"
    job.write_text(TEARDOWN_JOB)
    out = tmp_path / "out"
    r = run_job(out, job, options=("--format", "json"), timeout=180)
    assert r.returncode != 0, r.stderr[-3000:]
    assert "the job failed in its teardown, after its work" in r.stderr, r.stderr[-3000:]
    assert "of 2 rank(s) ran their program to its end" in r.stderr
    import json

    doc = json.loads(r.stdout)
    assert {x["rank"] for x in doc["ranks"]} == {0, 1}
    assert sum(row["calls"] for row in doc["summary"] if row["op"] == "all_reduce") == 10


@needs_nsys
@needs_torchrun
def test_one_rank_dies(job, tmp_path):
    out = tmp_path / "out"
    r = run_job(out, job, options=("--format", "json"), env=dict(os.environ, JOB_MODE="rank_dies"), timeout=180)
    # a bound on a hang, not a speed check: the surviving rank would otherwise wait for ever (on a
    # loaded 2-core machine it took a good part of this bound)
    assert r.seconds < 300, "torchrun stops the surviving rank"
    assert r.returncode != 0 and f"exited with status {r.returncode}" in r.stderr
    import json

    doc = json.loads(r.stdout)
    assert {x["rank"] for x in doc["ranks"]} == {0, 1}
    assert list(r.out.glob("*.sqlite")) + list(r.out.glob("*.arrow"))


@needs_nsys
@needs_torchrun
def test_ctrl_c_stops_the_job_and_keeps_the_report(job, tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does), bounded by timeouts."""
    out = tmp_path / "out"
    ready = tmp_path / "ready"
    env = dict(os.environ, JOB_MODE="hang", JOB_READY=str(ready))
    p = subprocess.Popen(
        run_job_cmd(out, job),
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 90
        while len(list(tmp_path.glob("ready.*"))) < 2 and time.time() < deadline and p.poll() is None:
            time.sleep(0.2)
        assert len(list(tmp_path.glob("ready.*"))) == 2, "the job did not start"
        time.sleep(1.0)
        os.killpg(p.pid, signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 130, stderr[-2000:]  # an interrupt's status, not torchrun's (1)
    assert "interrupted" in stderr
    assert list(out.glob("*.sqlite")) + list(out.glob("*.arrow")), stderr[-3000:]  # the report was written and exported
    assert "Comm. Op" in stdout and "all_reduce" in stdout  # and summarized


def test_nsys_not_on_path(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NSYSCOMM_NSYS"}
    env["PATH"] = str(Path(sys.executable).parent)  # (/bin is /usr/bin on merged-/usr systems: nsys is there)
    r = _nsyscomm(["run", "-o", tmp_path / "o", "--", "true"], env=env)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nsys" in lines[0] and "install" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_nsyscomm_nsys_points_to_a_missing_binary(tmp_path):
    missing = tmp_path / "nope" / "nsys"
    r = _nsyscomm(["run", "-o", tmp_path / "o", "--", "true"], env=dict(os.environ, NSYSCOMM_NSYS=str(missing)))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0], r.stderr


def test_output_folder_not_writable(tmp_path, monkeypatch):
    """As root a read-only folder is still writable: the write is made to fail with EACCES."""
    from nsyscomm.capture import launcher

    pytest.importorskip("torch")
    if shutil.which("nsys") is None and not os.environ.get("NSYSCOMM_NSYS"):
        monkeypatch.setattr(launcher, "find_nsys", lambda: ("nsys", (2022, 4)))
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    real_write = Path.write_text

    def denied(self, *a, **k):
        if str(self).startswith(str(ro)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_write(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", denied)
    try:
        r = CliRunner().invoke(main, ["run", "-o", str(ro / "out"), "--", "true"])
    finally:
        os.chmod(ro, 0o755)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "not writable" in lines[0] and str(ro / "out") in lines[0], r.output


def test_output_folder_full_mocked(tmp_path, monkeypatch):
    """ENOSPC after the folder check (the disk fills up): a short message, exit 2."""
    from nsyscomm.capture import launcher

    monkeypatch.setattr(launcher, "find_nsys", lambda: ("nsys", (2022, 4)))
    calls = {"n": 0}
    real_write = Path.write_text

    def full(self, *a, **k):
        if self.name == "nsys-command.txt":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real_write(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    r = CliRunner().invoke(main, ["run", "-o", str(tmp_path / "out"), "--", "true"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and "--output" in lines[0], r.output
    assert calls["n"] == 0


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    try:
        r = subprocess.run(
            ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && umount /mnt"],
            capture_output=True,
            timeout=20,
        )
        return r.returncode == 0
    except Exception:
        return False


@needs_nsys
@pytest.mark.skipif(
    not _can_mount_tmpfs(),
    reason="cannot mount a tmpfs in a private mount namespace here "
    "(needs root and unshare); test_output_folder_full_mocked covers the message",
)
def test_output_folder_full_real_tmpfs(tmp_path):
    """A 200 KB tmpfs (private mount namespace): nsys cannot write its report there and leaves it
    in /tmp; nsyscomm names that file instead of losing it, and returns the command's status."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (
        f"mount -t tmpfs -o size=200k tmpfs {mnt} && "
        f"{sys.executable} -m nsyscomm.cli run -o {mnt}/out -- {sys.executable} -c 'import sys; sys.exit(4)'"
    )
    # each attempt mounts a tmpfs of its own; run once more only when nsys itself failed
    r = run_profiled(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=180)
    assert r.returncode == 4, r.stderr[-3000:]
    assert "the command exited with status 4" in r.stderr
    left = [w for w in r.stderr.splitlines() if "left the report at" in w]
    assert left, r.stderr[-3000:]
    import re

    files = re.findall(r"(/\S+?\.(?:qdstrm|nsys-rep))", left[0])
    try:
        assert files and all(Path(f).is_file() for f in files), left[0]
    finally:
        for f in files:
            if "/nsys-report-" in f:
                Path(f).unlink(missing_ok=True)


class _Interrupted:
    """A process whose first wait() is interrupted by Ctrl-C, as the launcher sees it."""

    def __init__(self):
        self.signals, self.waits = [], 0

    pid = -1

    def wait(self, timeout=None):
        self.waits += 1
        if self.waits == 1:
            raise KeyboardInterrupt
        return 0

    def send_signal(self, sig):
        self.signals.append(sig)


@pytest.mark.parametrize(
    "profiler, says",
    [("nsys", "nsys was asked to stop the application"), ("torch", "each rank writes its trace as it exits")],
)
def test_ctrl_c_message_names_what_writes_the_output(profiler, says, capsys):
    from nsyscomm.capture import launcher

    proc, warnings_ = _Interrupted(), []
    assert launcher._wait(proc, warnings_, profiler=profiler) == 130
    assert proc.signals == [signal.SIGINT]
    assert len(warnings_) == 1 and says in warnings_[0]
    err = capsys.readouterr().err
    assert says.split(" ")[0] in err and ("nsys " in err.replace("nsyscomm", "")) == (profiler == "nsys")
