"""Asynchronous calls queued on one process group, on a real 2-rank gloo job under `nsyscomm run`
(tests/data/queued_job.py): a sharded optimizer's step of 16 async broadcasts, one rank 500 ms
late to it. Checked against figures nsyscomm does not make: the program's own timing of
synchronous broadcasts of the same sizes, of its queue's drain and of the whole step, and the
wall clock at each rank's first enqueue. Profiled by nsys
(completion marks) and by torch.profiler (gloo's own ranges on its worker threads): about 25 s
each on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics

import pytest

from tests.conftest import DATA, job_did_its_work, torchrun_cmd

SCRIPT = DATA / "queued_job.py"
MS = 1_000_000
STEP = 2  # the queued broadcasts' step: after the job's second optimizer.step()

pytestmark = [
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH"),
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH"),
]


@pytest.fixture(scope="module", params=["nsys", "torch"])
def job(request, tmp_path_factory):
    pytest.importorskip("torch")
    import nsyscomm
    from nsyscomm.capture.launcher import run

    base = tmp_path_factory.mktemp("queued")
    figures = base / "figures"
    figures.mkdir()
    os.environ["QUEUED_JOB_OUT"] = str(figures)
    try:
        res = run(torchrun_cmd(SCRIPT), output=str(base / "out"), profiler=request.param)
    finally:
        os.environ.pop("QUEUED_JOB_OUT", None)
    assert job_did_its_work(res.exit_code, res.warnings, len(list(figures.glob("rank*.json"))), 2), res.warnings
    own = {json.loads(f.read_text())["rank"]: json.loads(f.read_text()) for f in figures.glob("rank*.json")}
    loaded = nsyscomm.load(res.reports)
    assert not any("could not be paired" in w for w in loaded.warnings), loaded.warnings
    return loaded, own


def _step_calls(res, own):
    """The step's logical broadcasts (the last `calls` broadcasts of the job), by seq."""
    lc = res.con.execute(
        "SELECT seq, bytes, latency_ns, late_ns, last_rank FROM logical_collectives WHERE op = 'broadcast' ORDER BY seq"
    ).df()
    return lc.tail(own[0]["calls"])


def _sync_median(own, nbytes):
    return statistics.median(t for r in (0, 1) for t in own[r]["sync_ns"][str(nbytes)])


def _late(own):
    """(the late rank, how late it came to the step by the wall clock both ranks share, ms)."""
    late_rank = own[0]["late_rank"]
    return late_rank, (own[late_rank]["enqueue_wall_ns"] - own[1 - late_rank]["enqueue_wall_ns"]) / MS


def test_queued_broadcasts_take_about_a_synchronous_one(job):
    """A broadcast queued behind others is timed by its run on gloo's worker, not from its
    enqueue: the step's broadcasts of each size take, at the median, within three synchronous
    broadcasts of their size plus one of the largest (gloo runs two calls at once, which share
    the link) and 2 ms. (The median: one call can lose the CPU for tens of ms on a loaded machine;
    timed from their enqueue, half the calls of a size carried more than half the queue.)"""
    res, own = job
    largest = _sync_median(own, max(own[0]["sizes"]))
    calls = _step_calls(res, own)
    for nbytes, lat in calls.groupby("bytes")["latency_ns"]:
        bound = 3 * _sync_median(own, nbytes) + largest + 2 * MS
        assert lat.median() <= bound, (nbytes, sorted(lat / MS), bound / MS)


def test_latencies_add_up_to_about_the_queues_drain(job):
    """The step's broadcasts run two at a time, so their latencies add up to about twice the time
    the late rank's queue took to drain (by the program's own clock: from its first enqueue to its
    last wait's return), never to the queue's time again for each call behind it (timed from
    their enqueue, 16 calls added up to about 8 times the drain). Their time in gloo's queue is
    queued_ms, beside the latency in the summary."""
    res, own = job
    late_rank, _ = _late(own)
    total = _step_calls(res, own)["latency_ns"].sum()
    assert total <= 3 * own[late_rank]["drain_ns"] + 2 * MS, (total / MS, own[late_rank]["drain_ns"] / MS)
    assert total < min(own[r]["step_ns"] for r in (0, 1))
    rows = res.summary[res.summary["op"] == "broadcast"]
    assert (rows["queued_ms"] > 0).all(), rows


def test_the_late_rank_is_late_once(job):
    """Rank 0 slept 500 ms before the step and came to it that much after rank 1, by the wall
    clock (less where rank 1 was slow to come too): it is named late once by about that, at the
    step's first broadcast, not again at each of the 15 calls queued behind it. Beyond it: the
    late rank enqueueing its calls a little slower than the other (within its queue's drain)."""
    res, own = job
    late_rank, came = _late(own)
    assert came > 0.5 * own[late_rank]["sleep_ns"] / MS, came
    late = res.late
    step_late = late[(late["rank"] == late_rank) & (late["step"] == STEP)]
    big = late[(late["step"] == STEP) & (late["delay_ms"] > 0.5 * came)]
    assert list(big["rank"]) == [late_rank] and int(big["seq"].iloc[0]) == int(_step_calls(res, own)["seq"].iloc[0])
    slack = own[late_rank]["drain_ns"] / MS + 5
    assert 0.9 * came <= step_late["delay_ms"].sum() <= came + slack, (step_late["delay_ms"].sum(), came, slack)
    step = res.steps.set_index("step").loc[STEP]
    assert step["late_rank"] == late_rank
    # (the step's time is the longer rank's: the late rank may also have begun its step late)
    assert 0.9 * came <= step["late_ms"] <= min(came + slack, max(own[r]["step_ns"] for r in (0, 1)) / MS)


def test_waiting_is_counted_once(job):
    """Rank 1 waited for rank 0 in several queued calls at once: about how late rank 0 came, once,
    in the step's wait (the mean over the two ranks), and within each rank's elapsed time in the
    per-rank table, the skew and the communicator's figures. Beyond how late rank 0 came, both
    ranks can only have waited while rank 0's queue drained or at the step's closing barrier (by the
    program's own clock)."""
    res, own = job
    late_rank, came = _late(own)
    wait = res.step_breakdown.set_index("step").loc[STEP, "wait_ms"] * 2
    # the step ends with a barrier: a rank the machine's load held back from it keeps the other
    # waiting there, by as much as the program's own clock saw the barrier take
    barrier = sum(own[r]["barrier_ns"] for r in (0, 1)) / MS
    slack = 2 * own[late_rank]["drain_ns"] / MS + barrier + 5
    assert 0.9 * came <= wait <= came + slack, (wait, came, slack)
    ranks = res.ranks.set_index("rank")
    assert (ranks["wait_ms"] <= ranks["elapsed_ms"]).all()
    skew = {r["rank"]: r for r in res.skew["per_rank"]}
    assert all(skew[r]["wait_ms"] <= ranks.loc[r, "elapsed_ms"] for r in (0, 1))
    dims = res.dimensions
    assert (dims["comm_ms"] <= ranks["elapsed_ms"].sum()).all() and (dims["wait_ms"] <= ranks["elapsed_ms"].sum()).all()
