"""The extraction pool's workers: none inherits a lock held in the caller's process; a
dead or stuck worker is a one-line error naming the report, exit status 2, never a hang; Ctrl-C
ends the workers; the caller's ``__main__`` is not run again in them.

The functions below run in the workers (the tests put them in place of nsyscomm.extract.pool._one,
which the workers are handed by name): what they do there is the test's construction."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsyscomm
from nsyscomm import api
from nsyscomm.cli import main
from nsyscomm.extract import pool, workers
from tests.conftest import ROOT

# held by a thread of the caller's for the whole extraction, as DuckDB's locks are held by a
# thread inside a query of the caller's
HELD = threading.Lock()
# the workers write their process ids here (each test's own folder)
PIDS_ENV = "NSYSCOMM_TEST_PIDS"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path_factory.mktemp("pool") / "reports"
    gen.generate(out, ranks=4, steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2, per_rank=True, quiet=True)
    return out


@pytest.fixture
def pids(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "pids"
    d.mkdir()
    monkeypatch.setenv(PIDS_ENV, str(d))
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(tmp_path / "cache"))
    return d


def _note_pid(path: str) -> None:
    Path(os.environ[PIDS_ENV], f"{os.getpid()}-{Path(path).stem}").write_text(path)


def _try_held_lock(path, name, cache, threads):
    """Whether this worker could take HELD (a worker forked while the caller held it could not)."""
    got = HELD.acquire(timeout=2)
    if got:
        HELD.release()
    return got, threading.active_count(), nsyscomm.__file__, hasattr(pool, "_callers_only")


def _dies_on_rank_1(path, name, cache, threads):
    if Path(path).stem == "rank_00001":
        os.kill(os.getpid(), signal.SIGKILL)
    from nsyscomm.extract.cache import cached_extract

    return cached_extract(Path(path), name, cache, threads)


def _sleeps_on_rank_2(path, name, cache, threads):
    """At once, but for rank 2: a sleep (a worker stuck on it), its pid noted."""
    if Path(path).stem == "rank_00002":
        _note_pid(path)
        time.sleep(300)
    return path


def _sleeps(path, name, cache, threads):
    """A long extraction: every worker's pid noted, then a sleep."""
    _note_pid(path)
    time.sleep(300)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _noted(pids: Path, count: int, within: float = 60) -> list[int]:
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = sorted({int(p.name.split("-")[0]) for p in pids.iterdir()})
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"the workers noted {len(list(pids.iterdir()))} pid(s), not {count}")


def test_workers_inherit_no_lock_nor_object_of_the_caller(folder, monkeypatch):
    """A thread of the caller's holds a lock while the workers start: each worker can take it (a
    forked one inherits it held, forever), has no other thread, imports nsyscomm from the caller's
    tree, and has none of the caller's objects (a library caller's torch/gloo objects in a
    reference cycle, collected in a forked worker, would run their destructors there without the
    threads they belong to: a crash)."""
    monkeypatch.setattr(pool, "_one", _try_held_lock)
    monkeypatch.setattr(pool, "_callers_only", object(), raising=False)
    taken, release = threading.Event(), threading.Event()

    def hold():
        with HELD:
            taken.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        taken.wait(10)
        files = sorted(folder.glob("*.sqlite"))
        seen = pool.extract_many(files, [f.name for f in files], jobs=2, cache=False)
    finally:
        release.set()
        holder.join()
    assert [got for got, *_ in seen] == [True] * len(files), seen
    assert {(n, f, has) for _, n, f, has in seen} == {(1, nsyscomm.__file__, False)}


def test_a_worker_killed_mid_extraction_is_a_one_line_error_naming_the_report(folder, pids, monkeypatch):
    monkeypatch.setattr(pool, "_one", _dies_on_rank_1)
    r = CliRunner().invoke(main, ["summarize", str(folder), "--jobs", "2", "--no-cache"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsyscomm: error: "), r.stderr
    assert str(folder / "rank_00001.sqlite") in lines[0] and "a worker process ended" in lines[0]
    # the next load starts new workers and succeeds
    monkeypatch.undo()
    assert api.load([folder], jobs=2, cache=False).summary["calls"].sum() == 4 * 2 * 4 * 2


def test_a_stuck_worker_is_an_error_after_the_stall_timeout_and_is_ended(folder, pids, monkeypatch):
    files = sorted(folder.glob("*.sqlite"))
    names = [f.name for f in files]
    monkeypatch.setattr(pool, "_one", _sleeps_on_rank_2)
    pool.extract_many(files[:2], names[:2], jobs=2)  # the fork server started: the timeout counts no start-up
    # long enough for the workers' own start on a busy machine (the stuck one sleeps 300 s)
    monkeypatch.setenv(workers.STALL_ENV, "15")
    with pytest.raises(workers.WorkerError) as e:
        pool.extract_many(files, names, jobs=2)
    line = str(e.value)
    assert line.startswith(f"{files[2]}: no report finished in 15 s: a worker is stuck on it"), line
    assert workers.STALL_ENV in line and "\n" not in line
    stuck = _noted(pids, 1)
    assert not any(_alive(p) for p in stuck)
    # a command says it in one line, status 2; and a timeout that is not a number is an error too
    monkeypatch.setenv(workers.STALL_ENV, "soon")
    bad = CliRunner().invoke(main, ["summarize", str(folder), "--jobs", "2"])
    assert (
        bad.exit_code == 2
        and bad.stderr
        == f"nsyscomm: error: {workers.STALL_ENV}='soon' is not a number of seconds; give one like {workers.STALL_ENV}=1200\n"
    )


def stopped_with(code: int, err: str, want_code: int, line: str) -> bool:
    """The command's status and stderr are those of a command stopped: its one line, then nothing
    but what multiprocessing's resource tracker may write. That is a process of its own, which
    outlives the command by a moment: it removes the semaphores of the workers the command
    killed, and warns of them as it does."""
    lines = err.strip().splitlines()
    return (
        code == want_code
        and lines[:1] == [line]
        and all("multiprocessing/resource_tracker.py" in x or x.startswith("  warnings.warn(") for x in lines[1:])
    )


def test_ctrl_c_during_a_parallel_extraction_ends_the_workers(folder, pids):
    """SIGINT to the command alone (as a scheduler sends it; a terminal sends it to the workers
    too, and they ignore it): status 130 at once, one line, and none of its processes left."""
    code = (
        "import tests.extract.test_pool_workers as t; from nsyscomm.extract import pool; pool._one = t._sleeps\n"
        # the program as its console script runs it: its exit skips the interpreter's teardown,
        # where the exit hook of Python 3.11's process pools can write to a pipe already closed
        # (an "Exception ignored" traceback after the line), which users never reach
        "from nsyscomm.__main__ import entry; entry()"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(
        [sys.executable, "-c", code, "summarize", str(folder), "--jobs", "2", "--no-cache"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        busy = _noted(pids, 2)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert stopped_with(p.returncode, err, 130, "nsyscomm: interrupted"), err
    end = time.monotonic() + 10  # the fork server ends once it sees its caller gone
    while time.monotonic() < end and (_session(p.pid) or any(_alive(x) for x in busy)):
        time.sleep(0.1)
    assert not any(_alive(x) for x in busy) and not _session(p.pid)


def _session(sid: int) -> list[int]:
    """The live processes of session sid."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d.name))
    return out


def test_the_callers_main_runs_once(folder, tmp_path):
    """A script without an ``if __name__ == "__main__":`` guard that loads in parallel at its end
    (a training script that summarizes its run): its body runs once, not again in each worker."""
    marks = tmp_path / "marks"
    script = tmp_path / "train.py"
    script.write_text(
        "import json, os, nsyscomm\n"
        f"open({str(marks)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        f"r = nsyscomm.load({str(folder)!r}, jobs=2, cache=False)\n"
        "print(json.dumps(int(r.summary['calls'].sum())))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == 4 * 2 * 4 * 2
    assert len(marks.read_text().splitlines()) == 1
