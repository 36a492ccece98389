"""The training step of a Kineto trace's calls, from torch.profiler's ``ProfilerStep#N`` ranges,
and what it changes for the job: a trace taken at step N > 0 is a capture window, so its first
collective is no start-up. Generated traces with exact truth, the real traces in
../shared/real/kineto, and a real 2-rank gloo job profiled with a schedule."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from nsyscomm import api, nvtx_format
from nsyscomm.duck import arrow_frame
from nsyscomm.ingest.kineto import trace as kineto
from tests import conftest

REAL = conftest.REAL / "kineto"
need_real = pytest.mark.skipif(not REAL.is_dir(), reason="shared/real/kineto is absent")


def _x(name, cat, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _write(path: Path, events: list, rank: int = 0, world: int = 1) -> Path:
    doc = {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world}, "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def test_calls_inside_profiler_steps_get_their_number(tmp_path):
    """Each call gets the N of the ProfilerStep#N range of its process that holds its CPU start
    (ends included, the largest N on a boundary), whichever thread it ran on; none outside every
    step, none for a kernel without its launch, none for a step number past 64 bits."""
    pid, main, worker = 100, 100, 101
    ev = [
        _x("ProfilerStep#3", "user_annotation", 1000, 1000, pid, main),
        _x("ProfilerStep#4", "user_annotation", 2000, 1000, pid, main),
        _x("ProfilerStep#" + "9" * 25, "user_annotation", 3000, 1000, pid, main),
        # the GPU's copy of a step annotation is no CPU range, even under the process's pid
        _x("ProfilerStep#50", "gpu_user_annotation", 400, 5000, pid, 7),
        _x("gloo:broadcast", "user_annotation", 500, 10, pid, worker),  # before every step
        _x("gloo:all_reduce", "user_annotation", 1500, 10, pid, worker),  # step 3, on gloo's thread
        _x("gloo:all_reduce", "user_annotation", 2000, 10, pid, main),  # on the 3|4 boundary: 4
        _x("nccl:all_reduce", "user_annotation", 2500, 20, pid, main),
        _x("cudaLaunchKernel", "cuda_runtime", 2505, 5, pid, main, correlation=1),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 2600, 30, 0, 7, correlation=1, device=0, stream=7),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 2700, 30, 0, 7, correlation=2, device=0, stream=7),
        _x("gloo:all_reduce", "user_annotation", 3500, 10, pid, worker),  # step number past 64 bits
        _x("gloo:all_reduce", "user_annotation", 1500, 10, 7, 7),  # another process: not its steps
    ]
    e = kineto.extract(_write(tmp_path / "t.json", ev))
    c = arrow_frame(e.calls)
    got = sorted(
        (int(p), -1 if pd.isna(t) else int(t), None if pd.isna(s) else int(s))
        for p, t, s in zip(c["pid"], c["cpu_start"], c["step"])
    )
    assert got == [
        (7, 1_500_000, None),
        (100, -1, None),
        (100, 500_000, None),
        (100, 1_500_000, 3),
        (100, 2_000_000, 4),
        (100, 2_500_000, 4),
        (100, 3_500_000, None),
    ]


def test_the_wrappers_step_comes_first(tmp_path):
    """As in nsys reports: a call the wrapper labelled keeps the wrapper's step; one it left
    unlabelled takes the ProfilerStep's."""

    def msg(step):
        return nvtx_format.format_collective(
            "all_reduce", api="all_reduce", bytes=4, dtype="float32", numel=1, pg=0, gsize=1, seq=1, step=step
        )

    ev = [
        _x("ProfilerStep#12", "user_annotation", 1000, 1000, 5, 5),
        _x(msg(7), "user_annotation", 1100, 10, 5, 5),
        _x(msg(None), "user_annotation", 1200, 10, 5, 5),
    ]
    c = arrow_frame(kineto.extract(_write(tmp_path / "w.json", ev)).calls)
    assert set(c["source"]) == {"wrapper"}
    assert [int(s) for s in c.sort_values("cpu_start")["step"]] == [7, 12]


def _rank_trace(rank: int, first_late_us: int) -> list:
    """Steps 10 and 11 of a 2-rank gloo job, 100 ms each, one all_reduce per step on gloo's
    worker thread; this rank reaches the first one first_late_us after rank 0."""
    pid, base = 200 + rank, 1_000_000
    return [
        _x("ProfilerStep#10", "user_annotation", base, 100_000, pid, pid),
        _x("ProfilerStep#11", "user_annotation", base + 100_000, 100_000, pid, pid),
        _x("gloo:all_reduce", "user_annotation", base + 10_000 + first_late_us, 1_000, pid, pid + 1),
        _x("gloo:all_reduce", "user_annotation", base + 150_000, 1_000, pid, pid + 1),
    ]


def test_window_at_step_10_has_no_start_up(tmp_path):
    """A trace that opens at step 10: the ranks met before it, so the 50 ms by which rank 1 reaches
    the first all_reduce is lateness (named, in step 10's skew), not start-up set aside."""
    for r in (0, 1):
        _write(tmp_path / f"rank{r}.json", _rank_trace(r, 50_000 * r), rank=r, world=2)
    res = api.load(tmp_path)
    col = res.collectives
    assert sorted(zip(col["rank"], col["step"])) == [(0, 10), (0, 11), (1, 10), (1, 11)]
    assert res.startup["collectives"] == 0 and len(res.startup["rows"]) == 0
    steps = res.steps.set_index("step")
    assert steps.loc[10, "max_skew_ms"] == pytest.approx(50.0)
    assert int(steps.loc[10, "late_rank"]) == 1 and steps.loc[10, "late_ms"] == pytest.approx(50.0)
    assert steps.loc[11, "max_skew_ms"] == pytest.approx(0.0)


@need_real
def test_real_sampled_ranks_at_step_551(tmp_path):
    """HTA's two sampled ranks of a 128-rank job were profiled at steps 551 and 552: every call
    lies in one of the trace's own ProfilerStep ranges (read here from the file directly), and
    the first all_to_all, where rank 1 came 35.5 ms after rank 0, is no start-up."""
    res = api.load(REAL / "trace_filter")
    col = res.collectives
    for rank in (0, 1):
        with gzip.open(REAL / "trace_filter" / f"sampled_rank-{rank}.json.gz", "rt") as f:
            events = json.load(f)["traceEvents"]
        windows = [
            (int(e["name"].split("#")[1]), round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ]
        assert sorted(w[0] for w in windows) == [551, 552]
        mine = col[col["rank"] == rank]
        assert len(mine) == 10
        for t, step in zip(mine["cpu_start"], mine["step"]):
            holding = [n for n, s, e in windows if s <= t <= e]
            assert holding and int(step) == max(holding)
    assert res.collectives.groupby("step").size().to_dict() == {551: 10, 552: 10}
    assert res.startup["collectives"] == 0 and len(res.startup["rows"]) == 0
    # the first all_to_all's 35.534 ms of skew now counts in step 551
    steps = res.steps.set_index("step")
    assert steps.loc[551, "max_skew_ms"] >= 35.5


SCHEDULED = conftest.DATA / "scheduled_profile.py"


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_real_gloo_job_with_a_profiler_schedule(tmp_path):
    """A real 2-rank gloo job profiled by torch.profiler with schedule(wait=1, warmup=1, active=2)
    over 5 iterations of 3 collectives: the schedule records iterations 2 and 3 (its own numbers,
    the independent figure), so the calls are those of steps 2 and 3, 3 per step and rank, and the
    first of them is no start-up."""
    pytest.importorskip("torch")
    out, done = tmp_path / "traces", tmp_path / "done"
    out.mkdir()
    done.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSYSCOMM_")}
    # its own session, so that a job past its time leaves no worker behind
    p = subprocess.Popen(
        ["torchrun", "--standalone", "--nproc-per-node", "2", str(SCHEDULED), str(out), str(done)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise
    work_done = sorted(f.name for f in done.glob("done*.json")) == ["done0.json", "done1.json"]
    assert p.returncode == 0 or (work_done and conftest.aborted_in_teardown(err)), err[-3000:]
    assert sorted(p.name for p in out.glob("*.json")) == ["rank0.json", "rank1.json"]
    res = api.load(out)
    col = res.collectives
    recorded = [json.loads((done / f"done{r}.json").read_text())["recorded"] for r in (0, 1)]
    assert recorded == [[2, 3], [2, 3]]  # what torch's schedule says it records
    per = col.groupby(["rank", "step"]).size().to_dict()
    assert per == {(r, s): 3 for r in (0, 1) for s in recorded[r]}
    assert sorted(col["op"].value_counts().items()) == [("all_reduce", 8), ("broadcast", 4)]
    assert res.startup["collectives"] == 0 and len(res.startup["rows"]) == 0
