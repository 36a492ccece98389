"""Under a limit on the processes and threads of its user (RLIMIT_NPROC, `ulimit -u`, as on a
shared login node), summarize either fits within it (fewer workers, or none, and DuckDB on fewer
threads) with the same result, or says in one line which limit stops it and what to change,
exit status 2; within seconds, never the stall timeout nor a crash.

The limit does not apply to root: as root, the command runs with the real user id of an unused
user and no capabilities (its effective id stays root, so that it can read the interpreter and
its packages wherever they are installed); as an ordinary user, as that user. The reports are
Arrow exports: DuckDB finds the SQLite scanner's file with access(), which asks as the real user,
and the packages of a root-installed interpreter may not be readable to that user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.extract.test_pool_ends import ROOT, _path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not shutil.which("prlimit") or not shutil.which("setpriv"),
    reason="needs Linux's prlimit and setpriv",
)
# a run takes seconds; a hang runs into the stall timeout (600 s)
RUN_S = 180


def _tasks_of(uid: int) -> int:
    """Processes and threads whose real user is uid (what RLIMIT_NPROC counts), from /proc."""
    total = 0
    for d in Path("/proc").iterdir():
        try:
            status = (d / "status").read_text() if d.name.isdigit() else ""
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if status and int(fields["Uid"].split()[0]) == uid:
            total += int(fields["Threads"])
    return total


def _unused_uid() -> int:
    for uid in range(61000 + os.getpid() % 1000, 62000):
        if _tasks_of(uid) == 0:
            return uid
    pytest.skip("no unused user id between 61000 and 62000")


@pytest.fixture(scope="module")
def arrows():
    """Four per-rank Arrow exports in a folder any user may read."""
    import importlib.util

    from tests.support.arrow_convert import convert

    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    top = Path(tempfile.mkdtemp(prefix="nsyscomm-nproc-"))
    try:
        top.chmod(0o755)
        gen.generate(top / "sqlite", ranks=4, steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2, per_rank=True)
        (top / "reports").mkdir()
        for p in sorted((top / "sqlite").glob("*.sqlite")):
            convert(p, top / "reports" / f"{p.stem}.arrow", "arrow")
        for p in [top, *top.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _summarize(top: Path, nproc: int | None, jobs: int) -> subprocess.CompletedProcess:
    """summarize under a limit of ``nproc`` more tasks than its user runs now (None: no limit)."""
    cmd = [sys.executable, "-P", "-m", "nsyscomm.cli", "summarize", str(top / "reports")]
    cmd += ["--jobs", str(jobs), "--no-cache", "--format", "json"]
    if nproc is not None:
        if os.geteuid() == 0:
            uid = _unused_uid()
            ids = ["--ruid", str(uid), "--rgid", str(uid), "--clear-groups"]
            cmd = ["setpriv", *ids, "--inh-caps=-all", "--bounding-set=-all", "prlimit", f"--nproc={nproc}", *cmd]
        else:
            cmd = ["prlimit", f"--nproc={_tasks_of(os.getuid()) + nproc}", *cmd]
    env = dict(
        os.environ,
        PYTHONPATH=_path(),
        HOME=str(top),
        TMPDIR=str(top),
        # OpenBLAS starts a thread per core at numpy's import, however many the limit allows, and
        # says so on stderr: the same on every machine here, a thread
        OPENBLAS_NUM_THREADS="1",
        PYTHONWARNINGS="ignore::DeprecationWarning",
    )
    # a session of its own: whatever the command leaves behind (a fork server, workers, as it once
    # did under the limit) is ended with it
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=top, start_new_session=True
    )
    try:
        out, err = p.communicate(timeout=RUN_S)
    finally:
        _end_session(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _end_session(p: subprocess.Popen) -> None:
    from tests.extract.test_pool_workers import _session

    for pid in _session(p.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if p.poll() is None:
        p.kill()
        p.wait()


@pytest.fixture(scope="module")
def unlimited(arrows) -> list:
    r = _summarize(arrows, None, 1)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["summary"]


@pytest.mark.timeout(2 * RUN_S)
def test_under_a_tight_limit_on_threads_the_run_fits_with_the_same_result(arrows, unlimited):
    """Two workers asked for, with room for neither: the reports are extracted in the command's
    own process (it needs about 9 then, here; 12 leaves a margin)."""
    r = _summarize(arrows, 12, 2)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"] == unlimited


@pytest.mark.timeout(2 * RUN_S)
@pytest.mark.parametrize("nproc", [2, 4, 6])
def test_a_limit_nothing_fits_in_is_one_line_naming_it(arrows, nproc):
    r = _summarize(arrows, nproc, 2)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsyscomm: error: the limit on processes and threads"), r.stderr
    assert "RLIMIT_NPROC" in lines[0] and "ulimit -u" in lines[0]
