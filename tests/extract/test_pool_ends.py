"""However a parallel extraction ends, nothing of it outlives its caller: killed with SIGTERM or
SIGKILL mid-extraction, the caller leaves no fork server, no worker and no ``pymp-*`` folder.

The workers run tests.extract.test_pool_workers._sleeps in place of the extraction (their pids noted,
then a long sleep): they are busy when the signal comes, whatever the machine's load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nsyscomm
from tests.conftest import ROOT
from tests.extract.test_pool_workers import PIDS_ENV, _alive, _noted, _session, stopped_with

# how long the processes of a killed caller may take to end: they end at once when it works, and
# never (the sleeps last 300 s) when it does not
GONE_WITHIN_S = 30


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    """A folder of four small per-rank reports."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path_factory.mktemp("ends") / "reports"
    gen.generate(out, ranks=4, steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2, per_rank=True, quiet=True)
    return out


def _path() -> str:
    """PYTHONPATH for a child: the nsyscomm this test imported (so the test can be run against
    another checkout's code), then this checkout's tests."""
    return os.pathsep.join(dict.fromkeys([str(Path(nsyscomm.__file__).parents[1]), str(ROOT)]))


def _caller(folder: Path, tmp: Path, err: Path) -> subprocess.Popen:
    """summarize FOLDER --jobs 2 in a session of its own, its temporary folder ``tmp``, its stderr
    written to ``err`` (a pipe would stay open as long as any process left behind holds it)."""
    code = (
        "import tests.extract.test_pool_workers as t; from nsyscomm.extract import pool; pool._one = t._sleeps\n"
        # the program as its console script runs it: its exit skips the interpreter's teardown,
        # where the exit hook of Python 3.11's process pools can write to a pipe already closed
        # (an "Exception ignored" traceback after the line), which users never reach
        "from nsyscomm.__main__ import entry; entry()"
    )
    env = dict(os.environ, PYTHONPATH=_path(), TMPDIR=str(tmp))
    return subprocess.Popen(
        [sys.executable, "-c", code, "summarize", str(folder), "--jobs", "2", "--no-cache"],
        stdout=subprocess.DEVNULL,
        stderr=err.open("w"),
        env=env,
        cwd=tmp,  # not a checkout: `python -c` puts the current folder first on sys.path
        start_new_session=True,
    )


def _left(sid: int, busy: list[int], tmp: Path) -> tuple[list[int], list[str]]:
    """(processes of the caller's session or workers still alive, pymp-* folders), once both are
    empty or GONE_WITHIN_S have passed."""
    end = time.monotonic() + GONE_WITHIN_S
    while True:
        procs = sorted(set(_session(sid)) | {p for p in busy if _alive(p)})
        folders = sorted(p.name for p in tmp.glob("pymp-*"))
        if (not procs and not folders) or time.monotonic() > end:
            return procs, folders
        time.sleep(0.2)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_caller_killed_mid_extraction_leaves_no_process_nor_folder(reports, tmp_path, monkeypatch, sig):
    pids = tmp_path / "pids"
    pids.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv(PIDS_ENV, str(pids))
    err = tmp_path / "stderr"
    p = _caller(reports, tmp, err)
    try:
        busy = _noted(pids, 2)
        assert list(tmp.glob("pymp-*")), "the fork server's folder is in the caller's TMPDIR"
        p.send_signal(sig)
        p.wait(timeout=60)
        procs, folders = _left(p.pid, busy, tmp)
    finally:
        for pid in _session(p.pid):
            os.kill(pid, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()
    assert (procs, folders) == ([], [])
    if sig == signal.SIGTERM:  # a SIGTERM is a way to end, as Ctrl-C is: one line, 128 + 15
        text = err.read_text()
        assert stopped_with(p.returncode, text, 143, "nsyscomm: terminated"), text
    else:
        assert p.returncode == -signal.SIGKILL


def _calls_loaded(folder: str) -> int:
    """In a multiprocessing.Pool's worker: a parallel load's count of calls."""
    return int(nsyscomm.load(folder, jobs=2, cache=False).summary["calls"].sum())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_load_inside_a_multiprocessing_pool_worker_extracts_in_that_process(reports, tmp_path, method):
    """A Pool's workers are daemonic: multiprocessing refuses them children of their own. (In a
    process of its own: the Pool's workers import this checkout's code from its sys.path.)"""
    code = (
        "import multiprocessing, sys, tests.extract.test_pool_ends as t\n"
        f"with multiprocessing.get_context({method!r}).Pool(1) as p:\n"
        f"    print(p.apply_async(t._calls_loaded, ({str(reports)!r},)).get(timeout=120))\n"
    )
    env = dict(os.environ, PYTHONPATH=_path())
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=150
    )
    assert (out.returncode, out.stdout.strip()) == (0, str(4 * 2 * 4 * 2)), out.stderr[-2000:]
