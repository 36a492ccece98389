"""`nsyscomm run --profiler torch` on a program that runs its own torch.profiler with a schedule.

torch keeps one profiling session per process, so nsyscomm's profiler stands down for the
program's: the job must run to its end, the program's own traces must be written as without
nsyscomm, and the ranks' traces nsyscomm reads must be the program's (its schedule's window,
its ProfilerStep#N steps). The independent figures are the program's: the iterations its
schedule says it records (DONE/done<R>.json) and the traces its on_trace_ready wrote.
One real 2-rank gloo job, about 10-20 s on 2 cores.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from tests.conftest import DATA, ROOT, done_ranks, job_did_its_work, run_job

SCRIPT = DATA / "scheduled_profile.py"
WORLD = 2


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    base = tmp_path_factory.mktemp("ownprof")
    traces, done = base / "traces", base / "done"
    traces.mkdir()
    done.mkdir()
    options = ("--profiler", "torch", "--format", "json")
    r = run_job(base / "out", SCRIPT, traces, done, ranks=WORLD, options=options, cwd=str(ROOT), timeout=300)
    return r, traces, done


def test_job_and_its_own_profiler_run_to_the_end(job):
    """No crash (two Kineto profilers in one process crash it), and the program's own
    on_trace_ready wrote its traces and the job its end marks."""
    r, traces, done = job
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(done, "done*.json"), WORLD), r.stderr[-3000:]
    assert sorted(p.name for p in traces.glob("*.json")) == [f"rank{i}.json" for i in range(WORLD)]
    assert sorted(p.name for p in done.glob("done*.json")) == [f"done{i}.json" for i in range(WORLD)]


def test_the_ranks_traces_are_the_programs(job):
    """What nsyscomm read for each rank is what the program's profiler recorded (the same
    events as the program's own trace), and one line says so."""
    r, traces, done = job
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(done, "done*.json"), WORLD), r.stderr[-3000:]
    for rank in range(WORLD):
        with gzip.open(r.out / f"rank{rank}.json.gz", "rt") as f:
            ours = json.load(f)["traceEvents"]
        theirs = json.loads((traces / f"rank{rank}.json").read_text())["traceEvents"]
        assert ours == theirs
    assert not list(r.out.glob(".rank*.window*"))
    lines = [ln for ln in r.stderr.splitlines() if "ran its own torch.profiler" in ln]
    assert len(lines) == 1 and "rank(s) 0, 1" in lines[0], r.stderr[-3000:]


def test_calls_take_the_schedules_steps(job):
    """The job has no optimizer, so the wrapper saw no step boundary: the calls take the
    ProfilerStep#N of the schedule's recorded iterations, 3 per iteration and rank."""
    r, _, done = job
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(done, "done*.json"), WORLD), r.stderr[-3000:]
    recorded = [json.loads((done / f"done{i}.json").read_text())["recorded"] for i in range(WORLD)]
    assert recorded == [[2, 3]] * WORLD  # what torch's schedule says it records
    steps = {s["step"]: s["calls"] for s in json.loads(r.stdout)["steps"]}
    assert steps == {2: 3 * WORLD, 3: 3 * WORLD}


def test_unexported_windows_of_a_profiler_started_first(tmp_path):
    """The program's profiler starts before init_process_group (nsyscomm's never starts) and
    the program never exports (it reads key_averages()): nsyscomm saves the windows its schedule
    delivers, two cycles of one iteration, and the calls fall in those iterations, one per rank."""
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    done = tmp_path / "done"
    done.mkdir()
    script = DATA / "own_profiler_unexported.py"
    options = ("--profiler", "torch", "--format", "json")
    r = run_job(tmp_path / "out", script, done, ranks=WORLD, options=options, cwd=str(ROOT), timeout=300)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(done, "done*.json"), WORLD), r.stderr[-3000:]
    marks = [json.loads((done / f"done{i}.json").read_text()) for i in range(WORLD)]
    assert all(m["ops"] > 0 for m in marks)  # the program's own use of its profiler still works
    recorded = marks[0]["recorded"]
    assert recorded == [2, 5]  # what torch's schedule says it records
    steps = {s["step"]: s["calls"] for s in json.loads(r.stdout)["steps"]}
    assert steps == {n: WORLD for n in recorded}
    assert "(4 window(s) in all)" in r.stderr
    assert not list(r.out.glob(".rank*.window*"))
