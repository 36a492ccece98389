"""`nsyscomm run` owns its job's processes: nothing of the job outlives the run, however it ends
(a second Ctrl-C, a hangup, SIGKILL of nsyscomm, a daemon left by a rank), an interrupt is exit
130, and nsys's own failure to start the command is named.

The waits and their escalation are tested on plain Python processes (a second or two each); real
nsys runs of 2-rank gloo jobs cover what only nsys shows (its launcher adopts a rank's daemon; a
killed run's capture is imported by the next summarize): about 60 s on a busy 2-core machine.
Every job process carries a unique marker in its arguments, looked for in /proc.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from nsyscomm.capture import job_tree, job_wait, run_folder
from tests.conftest import run_job_cmd

needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH")
needs_torchrun = pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")


def running(marker: str) -> list[int]:
    """The processes whose command line holds marker (this one's aside)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in args and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def gone_within(marker: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running(marker)


def kill_all(marker: str) -> None:
    for pid in running(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def marker():
    m = f"nsyscomm-test-{uuid.uuid4().hex[:12]}"
    yield m
    kill_all(m)  # whatever a failing test left


# ------------------------------------------------------------------ the waits, on plain processes

# a process that ignores SIGINT and SIGTERM, with a child that does too; both stay until killed
STUBBORN = textwrap.dedent(
    """\
    import os, signal, subprocess, sys, time
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)
    if len(sys.argv) < 4:
        subprocess.Popen([sys.executable, __file__, sys.argv[1], sys.argv[2], "child"])
    open(sys.argv[2] + "." + str(len(sys.argv)), "w").close()
    time.sleep(120)
    """
)

# a process that leaves a daemon (double fork, setsid) and exits at once
LEAVES_DAEMON = textwrap.dedent(
    """\
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    os.wait()
    """
)


def _start(tmp_path, code: str, marker: str) -> tuple[subprocess.Popen, job_tree.JobTree, Path]:
    script, ready = tmp_path / "job.py", tmp_path / "ready"
    script.write_text(code)
    mark = job_tree.new_mark()
    env = dict(os.environ, **{job_tree.MARK_ENV: mark})
    proc = subprocess.Popen([sys.executable, str(script), marker, str(ready)], env=env, start_new_session=True)
    return proc, job_tree.JobTree(mark, proc.pid), ready


def _interrupt_after(seconds: float, sig: int = signal.SIGINT) -> threading.Timer:
    t = threading.Timer(seconds, os.kill, (os.getpid(), sig))
    t.start()
    return t


def test_a_second_ctrl_c_returns_only_once_the_job_is_gone(tmp_path, marker, monkeypatch):
    """A job that ignores SIGINT and SIGTERM: the second Ctrl-C ends it (SIGKILL after the grace
    period), and the wait returns 130 only when none of its processes is left."""
    monkeypatch.setattr(job_tree, "TERM_GRACE_S", 1.0)
    proc, tree, ready = _start(tmp_path, STUBBORN, marker)
    deadline = time.monotonic() + 60
    while not (Path(f"{ready}.3").exists() and Path(f"{ready}.4").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(running(marker)) == 2
    warnings_: list[str] = []
    timers = [_interrupt_after(0.3), _interrupt_after(1.0)]
    try:
        rc = job_wait.wait(proc, warnings_, profiler="torch", tree=tree)
        left = running(marker)
    finally:
        for t in timers:
            t.cancel()
    assert rc == 130
    assert left == [], "the wait returned while the job still ran"
    assert any("the job was ended (interrupted again)" in w for w in warnings_), warnings_


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_hangup_ends_a_job_that_does_not_stop(tmp_path, marker, monkeypatch, sig):
    """No one is there to press Ctrl-C again: after the grace period the job is ended, and the
    status is 130 whatever the job returned."""
    monkeypatch.setattr(job_wait, "STOP_GRACE_S", 0.5)
    monkeypatch.setattr(job_tree, "TERM_GRACE_S", 0.5)
    monkeypatch.setattr(job_wait, "_detach_from_terminal", lambda: None)  # pytest's own terminal stays
    proc, tree, ready = _start(tmp_path, STUBBORN, marker)
    deadline = time.monotonic() + 60
    while not Path(f"{ready}.4").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    warnings_: list[str] = []
    timer = _interrupt_after(0.2, sig)
    try:
        rc = job_wait.wait(proc, warnings_, profiler="torch", tree=tree)
    finally:
        timer.cancel()
    assert rc == 130 and running(marker) == []
    assert any("did not stop within 0.5 s and was ended" in w for w in warnings_), warnings_


def test_a_daemon_left_by_the_job_is_named_and_ended(tmp_path, marker):
    proc, tree, _ = _start(tmp_path, LEAVES_DAEMON, marker)
    warnings_: list[str] = []
    t0 = time.monotonic()
    rc = job_wait.wait(proc, warnings_, profiler="torch", tree=tree)
    assert rc == 0 and time.monotonic() - t0 < 60
    assert running(marker) == []
    (w,) = [w for w in warnings_ if "left 1 process(es) running" in w]
    assert re.search(r"running when the command exited: \d+ \(.*\); they were ended$", w), w


class _FirstWaitSignalled:
    """A job whose first wait is cut by a signal, then exits with status 1 (torchrun's, when its
    workers were stopped)."""

    pid = -1

    def __init__(self, exc: BaseException):
        self.exc, self.waits, self.signals = exc, 0, []

    def wait(self, timeout=None):
        self.waits += 1
        if self.waits == 1:
            raise self.exc
        return 1

    def send_signal(self, sig):
        self.signals.append(sig)

    def poll(self):
        return 1


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), job_wait.Stopped(signal.SIGTERM)], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_is_130_whatever_the_job_returned(exc):
    proc, warnings_ = _FirstWaitSignalled(exc), []
    assert job_wait.wait(proc, warnings_) == 130
    assert proc.signals == [signal.SIGINT]  # nsys is asked once to stop and write the report


def test_the_watchdog_ends_the_job_when_the_launcher_is_killed(tmp_path, marker):
    """The launcher (a process holding the watchdog's pipe) is killed: the watchdog asks the
    job's first process to stop, then ends all of it."""
    code = textwrap.dedent(
        f"""\
        import os, subprocess, sys, time
        sys.path.insert(0, {str(Path(job_tree.__file__).parent)!r})
        import job_tree
        mark = job_tree.new_mark()
        job = subprocess.Popen([sys.executable, {str(tmp_path / "job.py")!r}, os.environ["MARKER"], {str(tmp_path / "ready")!r}],
                               env=dict(os.environ, **{{job_tree.MARK_ENV: mark}}), start_new_session=True)
        dog = job_tree.Watchdog(job_tree.JobTree(mark, job.pid), {str(tmp_path / "log")!r}, graces=(0.5, 0.5))
        print("started", flush=True)
        time.sleep(120)
        """
    )
    (tmp_path / "job.py").write_text(STUBBORN)
    launcher = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ, MARKER=marker)
    )
    try:
        assert launcher.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while not Path(f"{tmp_path / 'ready'}.4").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(running(marker)) == 2
        launcher.kill()
        launcher.wait()
        assert gone_within(marker, 60) == []
    finally:
        launcher.kill()
    assert "its watchdog stops the job" in (tmp_path / "log").read_text()


# ------------------------------------------------------------------ nsys's own failures

NOT_EXECUTABLE = "#!/bin/sh\necho never\n"


@needs_nsys
@pytest.mark.parametrize("case", ["not executable", "agent launcher"])
def test_nsys_failing_to_start_the_command_is_named_and_the_folder_stays_usable(tmp_path, case):
    prog = tmp_path / "prog.sh"
    prog.write_text(NOT_EXECUTABLE)
    env = dict(os.environ)
    if case == "not executable":
        prog.chmod(0o644)
        said, fix = "Not executable", "chmod +x"
    else:
        prog.chmod(0o755)
        env["TMPDIR"] = str(tmp_path / "missing")  # nsys's agent cannot start without a temporary folder
        said, fix = "Agent launcher failed", "TMPDIR"
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", "run", "-o", str(out), "--", str(prog)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("nsyscomm: error:")]
    assert len(errors) == 1 and said in errors[0] and fix in errors[0], r.stderr
    assert "the command exited with status" not in r.stderr  # the command never ran
    assert run_folder.previous_run(out) == []  # a run can use the folder again


def test_a_left_capture_that_cannot_be_imported_is_named_with_the_commands(tmp_path):
    """Without nsys, the capture a killed run left is named with what imports it, not "no
    report in this folder"."""
    out = tmp_path / "run"
    out.mkdir()
    (out / run_folder.COMMAND_NAME).write_text("nsys profile ... -o report ...\n")
    (out / "report.qdstrm").write_bytes(b"capture")
    env = dict(os.environ, NSYSCOMM_NSYS=str(tmp_path / "no" / "nsys"), NSYSCOMM_QDSTRM_IMPORTER="")
    r = subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", "summarize", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out / "report.qdstrm") in lines[0], r.stderr
    assert "QdstrmImporter -i" in lines[0] and "nsys export --type" in lines[0]
    assert sorted(p.name for p in out.iterdir()) == [run_folder.COMMAND_NAME, "report.qdstrm"]  # nothing written


# ------------------------------------------------------------------ real runs under nsys

GLOO_JOB = textwrap.dedent(
    """\
    import os, sys, time
    import torch, torch.distributed as dist
    mode, ready = os.environ["JOB_MODE"], os.environ["JOB_READY"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1024)
    for _ in range(4):
        dist.all_reduce(t)
    if mode == "daemon" and rank == 0 and os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)  # far past the test's bounds: it must be ended, not waited for
        os._exit(0)
    open(ready + "." + str(rank), "w").close()
    if mode != "daemon":
        time.sleep(120)  # until stopped; bounded even if the stop never comes
    dist.barrier()
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("gloo") / "job.py"
    p.write_text(GLOO_JOB)
    return p


def _start_run(gloo_job, tmp_path, marker, mode: str, options=()) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "out"
    env = dict(os.environ, JOB_MODE=mode, JOB_READY=str(tmp_path / "ready"))
    p = subprocess.Popen(
        run_job_cmd(out, gloo_job, marker, options=options),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return p, out


def _wait_ready(p: subprocess.Popen, tmp_path: Path) -> None:
    deadline = time.monotonic() + 150
    while len(list(tmp_path.glob("ready.*"))) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    if len(list(tmp_path.glob("ready.*"))) < 2:
        p.kill()
        _, err = p.communicate()
        pytest.fail(f"the job did not start: {err[-3000:]}")


def _killed_run(gloo_job, tmp_path: Path, marker: str) -> Path:
    """A run killed (SIGKILL) once its job runs: its folder, once nothing of the job is left."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    p, out = _start_run(gloo_job, tmp_path, marker, "hold", options=("--no-summary",))
    try:
        _wait_ready(p, tmp_path)
        p.kill()
        p.wait()
        assert gone_within(marker, 90) == []
        deadline = time.monotonic() + 30  # the watchdog exits with the job; nsys's move is done then
        while not (out / "report.qdstrm").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
    return out


@needs_nsys
@needs_torchrun
def test_a_killed_run_leaves_nothing_running_and_summarize_imports_its_capture(gloo_job, tmp_path, marker):
    """SIGKILL of `nsyscomm run`: its watchdog has nsys stop the job and write the capture (not
    imported: the run is gone); the next `summarize` of the folder imports it and reads it. Once
    more when nsys itself failed to write it (Debian's nsys now and then does on a loaded
    machine: tests/conftest.py, run_profiled)."""
    out = _killed_run(gloo_job, tmp_path / "first", marker)
    if not (out / "report.qdstrm").exists():
        out = _killed_run(gloo_job, tmp_path / "again", marker)
    assert (out / "report.qdstrm").exists(), sorted(f.name for f in out.iterdir())
    r = subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", "summarize", "--format", "json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "importing report.qdstrm, left unimported by an interrupted run" in r.stderr
    assert {x["rank"] for x in json.loads(r.stdout)["ranks"]} == {0, 1}


@needs_nsys
@needs_torchrun
def test_a_daemon_left_by_a_rank_does_not_hold_the_run(gloo_job, tmp_path, marker):
    """nsys's launcher adopts the daemon and nsys waits for it: the run ends it once the job's own
    processes have exited, says so, and summarizes."""
    p, out = _start_run(gloo_job, tmp_path, marker, "daemon", options=("--format", "json"))
    try:
        stdout, err = p.communicate(timeout=240)  # the daemon would hold it 600 s
        left = running(marker)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err[-3000:]
    assert left == []
    assert "the job left 1 process(es) running" in err and marker in err, err[-3000:]
    assert {x["rank"] for x in json.loads(stdout)["ranks"]} == {0, 1}
