"""Real pipelines on 2 gloo ranks. A hand-written one (blocking send/recv, tests/data/
p2p_pipeline_job.py) under `nsyscomm run`: stage 1's receive waits for stage 0's sleep, the sender is
named late, and the what-if's replay gives back the step period the job printed itself. A GPipe
schedule (torch.distributed.pipelining) with no optimizer: each schedule step() is a step."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest

from tests.conftest import DATA, DONE_ENV, done_ranks, job_did_its_work, run_job

JOB = DATA / "p2p_pipeline_job.py"
SLEEP_MS = 80.0  # p2p_pipeline_job.SLEEP_S


@pytest.fixture(scope="module")
def p2p_run(tmp_path_factory):
    if shutil.which("nsys") is None or shutil.which("torchrun") is None:
        pytest.skip("nsys and torchrun are needed for the real run")
    out = tmp_path_factory.mktemp("pipe") / "out"
    done = tmp_path_factory.mktemp("done")
    env = dict(os.environ, **{DONE_ENV: str(done)})
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    r = run_job(out, JOB, options=("--format", "json"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(done), 2), r.stderr[-3000:]
    periods = [float(x) for x in re.findall(r"^period_ms ([0-9.]+)$", r.stdout + r.stderr, re.M)]
    assert len(periods) == 5, r.stderr[-3000:]
    return json.loads(r.stdout[r.stdout.index("{") :]), periods, r.out


def test_the_receiver_waits_for_the_sleeping_sender(p2p_run):
    import nsyscomm

    _, _, out = p2p_run
    res = nsyscomm.load([out], cache=False)
    rows = res.con.execute(
        "SELECT (c.duration_ns - l.latency_ns) / 1e6, l.last_rank FROM collectives c "
        "JOIN logical_collectives l ON l.logical_id = c.logical_id "
        "WHERE c.rank = 1 AND c.op = 'recv' AND c.peer = 0 ORDER BY c.exec_start"
    ).fetchall()
    assert len(rows) == 6, rows
    # each step's receive waits for stage 0's sleep (and no more than a few more ms of its work)
    for wait, late in rows[1:]:
        assert 0.8 * SLEEP_MS <= wait <= 3 * SLEEP_MS and late == 0, rows


def test_the_replay_gives_back_the_printed_step_period(p2p_run):
    doc, periods, _ = p2p_run
    rep = doc["diagnosis"]["whatif"]["reproduction"]
    steps = {s["step"]: s for s in rep["steps"]}
    # steps 1-5 each hold one period of the loop (rank 1's ends, on its own clock)
    replayed = [steps[s]["replayed_ms"] for s in range(1, 6)]
    assert all(steps[s]["reproduced"] for s in range(1, 6)), rep
    assert np.median(replayed) == pytest.approx(np.median(periods), rel=0.10), (replayed, periods)
    # the period is the sleep and more: the job ran as built. One period may come out a few ms
    # short on a busy machine (rank 1's end of the step before it was itself delayed), so the
    # median is what must hold the sleep
    assert np.median(periods) >= SLEEP_MS, periods
    # the pipeline bubble is no straggler's delay: removing stragglers cannot save the sleep each
    # step waits for (it would if the bubble were counted as lateness); a busy machine's own
    # scheduling delays are real lateness, and may be saved
    ns = next(w for w in doc["diagnosis"]["what_if"] if w["scenario"] == "no_straggler")
    assert ns["saved_ms"] < 0.5 * SLEEP_MS, ns


def _gpipe(rank, path, out, steps):
    import torch
    import torch.distributed as dist

    from nsyscomm.capture import wrapper as W

    msgs: list = []
    W.annotate(True)
    W._push = msgs.append
    W._pop = lambda: None
    W._mark = msgs.append
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    torch.manual_seed(0)
    stage = PipelineStage(torch.nn.Linear(8, 8), rank, 2, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda o, t: o.sum())
    for _ in range(steps):
        if rank == 0:
            sched.step(torch.randn(4, 8))
        else:
            sched.step(target=torch.zeros(4, 8))
    torch.save(msgs, f"{out}.{rank}")
    dist.barrier()
    dist.destroy_process_group()


def test_a_pipeline_schedule_without_optimizer_makes_steps(tmp_path):
    import torch
    import torch.multiprocessing as mp

    from nsyscomm import nvtx_format as fmt

    pytest.importorskip("torch.distributed.pipelining")
    steps = 3
    mp.spawn(_gpipe, args=(str(tmp_path / "store"), str(tmp_path / "out"), steps), nprocs=2, join=True)
    for rank in range(2):
        msgs = [fmt.parse(m) for m in torch.load(tmp_path / f"out.{rank}") if m.startswith(fmt.COLLECTIVE_PREFIX)]
        p2p = [m for m in msgs if m["kind"] in ("nsyscomm:send", "nsyscomm:recv")]
        by_step: dict = {}
        for m in p2p:
            by_step[m["step"]] = by_step.get(m["step"], 0) + 1
        # 2 micro-batches: forward and backward messages each, the same count in every step (step 0
        # also holds the stages' shape exchange before the first)
        assert sorted(by_step) == [str(s) for s in range(steps)], by_step
        later = {by_step[str(s)] for s in range(1, steps)}
        assert len(later) == 1 and min(later) >= 2 and by_step["0"] >= min(later), by_step
