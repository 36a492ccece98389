"""Asynchronous calls on a real 2-rank gloo job under `nsyscomm run`, timed by their execution
and checked against figures nsyscomm does not make (tests/data/async_job.py): the program's own
timing of synchronous all_reduces of the same sizes, and sleeps it puts in rank 1 (rank 0's work
cannot complete before rank 1 has enqueued its side). Profiled by nsys and by torch.profiler:
about 50 s each on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import pytest

from tests.conftest import DATA, job_did_its_work, torchrun_cmd

SCRIPT = DATA / "async_job.py"
MS = 1_000_000

pytestmark = [
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH"),
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH"),
]


@pytest.fixture(scope="module", params=["nsys", "torch"])
def job(request, tmp_path_factory):
    """The job profiled by nsys (completion marks and wait ranges) and by torch.profiler (gloo's
    own ranges on its worker threads)."""
    pytest.importorskip("torch")
    import nsyscomm
    from nsyscomm.capture.launcher import run

    base = tmp_path_factory.mktemp("async")
    figures = base / "figures"
    figures.mkdir()
    os.environ["ASYNC_JOB_OUT"] = str(figures)
    try:
        res = run(
            torchrun_cmd(SCRIPT),
            output=str(base / "out"),
            profiler=request.param,
        )
    finally:
        os.environ.pop("ASYNC_JOB_OUT", None)
    # each rank writes its own figures once its work is done
    assert job_did_its_work(res.exit_code, res.warnings, len(list(figures.glob("rank*.json"))), 2), res.warnings
    own = {json.loads(f.read_text())["rank"]: json.loads(f.read_text()) for f in figures.glob("rank*.json")}
    assert sorted(own) == [0, 1]
    loaded = nsyscomm.load(res.reports)
    assert not any("could not be paired" in w for w in loaded.warnings), loaded.warnings
    return loaded, own, request.param, res.reports


def _sync_ms(own, key):
    """The program's own synchronous time of that size, in ms: the fastest of its repeats on
    either rank (the wire's time; an asynchronous call of the size cannot be faster, and a busy
    machine only makes the repeats slower)."""
    return min(min(own[r][key]) for r in (0, 1)) / MS


def _plain(c):
    """The api=all_reduce calls of each rank in order: warm-up, REPS synchronous, async, late."""
    a = c[c["api"] == "all_reduce"].sort_values("seq")
    return {r: a[a["rank"] == r].reset_index(drop=True) for r in (0, 1)}


def test_invariants(job):
    res, _, _, _ = job
    c = res.collectives
    assert (c["duration_ns"] >= 0).all() and (c["exec_end"] >= c["exec_start"]).all()
    assert (c["exec_start"] >= c["cpu_start"]).all()
    span = c["exec_end"].max() - c["cpu_start"].min()
    assert (c["duration_ns"] <= span).all()


def test_async_all_reduce_takes_as_long_as_a_synchronous_one(job):
    """async_op=True (16 MiB), then 150 ms of the program's own work, then wait(): the call's
    execution is the transfer (about a synchronous all_reduce of the size), not its enqueue."""
    res, own, profiler, _ = job
    sync = _sync_ms(own, "sync_ns")
    for r, calls in _plain(res.collectives).items():
        a = calls.iloc[6]
        took = a["duration_ns"] / MS
        enqueue = (a["cpu_end"] - a["cpu_start"]) / MS
        # a factor of 4 below the wire's time: the synchronous repeats ran at another moment of a
        # shared machine. Timed as its enqueue, the call would end as its issuing call returns
        # (which itself took milliseconds on a loaded machine)
        assert took >= 0.25 * sync and a["exec_end"] > a["cpu_end"], (r, took, sync, enqueue)
        assert took <= 140, (r, took)  # done while the program slept 150 ms after the enqueue
        if profiler == "nsys":  # the caller's wait() was seen
            assert a["wait_end"] > a["wait_start"] >= a["cpu_end"]


def test_async_all_reduce_cannot_end_before_the_late_rank_enqueues(job):
    """Rank 1 sleeps 400 ms before its side: rank 0's work completes after rank 1's enqueue."""
    res, _, _, _ = job
    calls = _plain(res.collectives)
    r0, r1 = calls[0].iloc[7], calls[1].iloc[7]
    assert r0["exec_end"] >= r1["cpu_start"]
    assert r0["duration_ns"] >= 300 * MS and r0["cpu_end"] - r0["cpu_start"] < 100 * MS


def test_irecv_cannot_end_before_the_send_is_posted(job):
    """irecv, and a batch_isend_irecv exchange: rank 0's receive from rank 1 ends after rank 1,
    400 ms late, posted its send."""
    res, _, _, _ = job
    c = res.collectives
    for recv_api, send_api in (("irecv", "isend"), ("batch_isend_irecv", "batch_isend_irecv")):
        recv = c[(c["rank"] == 0) & (c["op"] == "recv") & (c["api"] == recv_api)]
        send = c[(c["rank"] == 1) & (c["op"] == "send") & (c["api"] == send_api)]
        assert len(recv) == len(send) == 1, recv_api
        recv, send = recv.iloc[0], send.iloc[0]
        assert recv["exec_end"] >= send["cpu_start"] and recv["duration_ns"] >= 300 * MS, recv_api


def test_a_send_waited_for_late_ends_by_its_receive(job):
    """Rank 0 isends, sleeps 300 ms, then waits; rank 1 receives at once. gloo's send Work has
    no future, so only the wait would end it: its execution ends by its receive's end instead,
    within the time from the send's start to the receive's end by the program's own clock, far
    short of the sleep it measured unless rank 1 came that late to its receive."""
    res, own, _, _ = job
    c = res.collectives
    send = c[(c["rank"] == 0) & (c["op"] == "send") & (c["api"] == "isend")]
    recv = c[(c["rank"] == 1) & (c["op"] == "recv") & (c["api"] == "recv")]
    assert len(send) == len(recv) == 1
    send, recv = send.iloc[0], recv.iloc[0]
    assert send["logical_id"] == recv["logical_id"]  # one message
    sleep_ms, recv_ms = own[0]["send_sleep_ns"] / MS, own[1]["recv_ns"] / MS
    assert recv["duration_ns"] / MS <= recv_ms  # the receive's range lies inside the program's timing
    # the longest the message can have been in flight, by the wall clock both ranks share
    message_ms = (own[1]["recv_end_wall_ns"] - own[0]["send_start_wall_ns"]) / MS
    send_ms = send["duration_ns"] / MS
    assert send_ms <= message_ms + 2, (send_ms, message_ms, recv_ms, sleep_ms)
    if message_ms < 0.5 * sleep_ms:  # rank 1 received well before rank 0 stopped sleeping
        assert send_ms < 0.5 * sleep_ms, (send_ms, message_ms, sleep_ms)
    assert send["exec_end"] <= recv["exec_end"] and send["duration_ns"] >= 0


def test_functional_all_reduce_runs_until_the_late_rank_and_its_wait(job):
    res, _, profiler, _ = job
    c = res.collectives
    f = c[c["api"] == "funcol.all_reduce"].set_index("rank")
    assert f.loc[0, "exec_end"] >= f.loc[1, "cpu_start"]
    if profiler == "nsys":
        assert f.loc[0, "wait_end"] >= f.loc[0, "wait_start"]


def test_ddp_buckets_take_as_long_as_a_synchronous_all_reduce(job):
    """DDP's reducer all_reduces each 1 MiB bucket on gloo's thread while backward goes on: its
    execution is comparable to the program's synchronous all_reduce of the same size."""
    res, own, _, _ = job
    c = res.collectives
    buckets = c[(c["api"] == "ddp.allreduce") & (c["bytes"] == 4 * (512 * 512 + 512))]
    assert len(buckets) >= 2 * 8, buckets  # 4 buckets x 2 ranks x the steps after the first
    sync = _sync_ms(own, "layer_sync_ns")
    took = statistics.median(buckets["duration_ns"]) / MS
    enqueue = statistics.median(buckets["cpu_end"] - buckets["cpu_start"]) / MS
    assert took >= 0.25 * sync, (took, sync, enqueue)
    assert took >= 1.5 * enqueue, (took, enqueue)


def test_an_arrow_export_reads_the_same_marks(job, tmp_path):
    """nsys's Arrow export (what `nsyscomm run` exports by default) gives the same spans and waits."""
    import subprocess

    import nsyscomm

    res, _, profiler, reports = job
    if profiler != "nsys":
        pytest.skip("an nsys report only")
    out = tmp_path / "report.sqlite"  # the same name: rows name their report
    rep = Path(reports[0]).with_suffix(".nsys-rep")
    subprocess.run(
        ["nsys", "export", "--type", "arrow", "-f", "true", "-o", str(out), str(rep)], check=True, capture_output=True
    )
    cols = ["rank", "op", "group", "seq", "peer", "exec_start", "exec_end", "wait_start", "wait_end"]
    got = nsyscomm.load([out]).collectives[cols].sort_values(cols[:5]).reset_index(drop=True)
    want = res.collectives[cols].sort_values(cols[:5]).reset_index(drop=True)
    assert got.equals(want) and want["wait_end"].notna().sum() >= 4


def test_the_trace_draws_each_async_call_by_its_execution(job):
    """The Perfetto trace: each asynchronous call's slice is its execution (the collectives
    table's exec_start/exec_end, read with SQL), its enqueue a launch slice on the calling thread
    linked to it by a flow, and the caller's wait a slice of its own. The 16 MiB async
    all_reduce's slice lasts about what the wire needs (the program's own synchronous figure)."""
    from nsyscomm.views import trace as tr

    res, own, profiler, _ = job
    doc = tr.build(res)
    origin = doc["otherData"]["time_origin_ns"]

    def span(e):
        return round(e["ts"] * 1000) + origin, round((e["ts"] + e["dur"]) * 1000) + origin

    slices: dict = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] in ("collective", "collective_launch", "collective_wait"):
            a = e["args"]
            slices.setdefault((e["cat"], e["pid"], a["group"], a["op"], a["seq"], a["peer"]), []).append(e)
    rows = res.con.execute(
        'SELECT rank, "group", op, seq, peer, cpu_start, cpu_end, exec_start, exec_end, wait_start, wait_end, api '
        "FROM collectives"
    ).fetchall()
    ids = [r[:5] for r in rows]
    asynchronous = 0
    for r in rows:
        if ids.count(r[:5]) > 1:
            continue  # no identity to find its slices by
        cpu, exe, wait = r[5:7], r[7:9], r[9:11]
        (call,) = slices[("collective", *r[:5])]
        assert span(call) == exe, r
        launches = slices.get(("collective_launch", *r[:5]), [])
        if exe != cpu:
            asynchronous += 1
            (launch,) = launches
            assert span(launch) == cpu and call["tid"] != launch["tid"], r
        else:
            assert not launches, r
        if wait[0] is not None:
            (w,) = slices[("collective_wait", *r[:5])]
            assert span(w) == wait, r
    # the program's async all_reduce, DDP's buckets, isend/irecv, the functional all_reduce
    assert asynchronous >= 20 and doc["otherData"]["launch_flows"] == asynchronous
    sync = _sync_ms(own, "sync_ns")
    for r in (0, 1):
        big = _plain(res.collectives)[r].iloc[6]
        (call,) = slices[("collective", r, big["group"], "all_reduce", big["seq"], None)]
        assert call["dur"] / 1000 >= 0.25 * sync, (r, call["dur"], sync)


def test_ddp_buckets_are_waited_for_at_the_end_of_backward(job):
    """DDP's reducer waits for its buckets in C++, in its finalize at the end of backward: each
    bucket's wait starts once that backward has launched its last bucket, ends once every bucket
    is done, and lies inside the backward as the program timed it."""
    res, own, profiler, _ = job
    if profiler != "nsys":
        pytest.skip("torch.profiler's traces hold no wait ranges")
    c = res.collectives
    buckets = c[c["api"] == "ddp.allreduce"]
    assert len(buckets) >= 2 * 3 and buckets["wait_end"].notna().all(), buckets
    for (rank, _step), one in buckets.groupby(["rank", "step"]):
        assert one["wait_start"].min() >= one["cpu_end"].max() - 1_000, one  # within a push's time
        assert one["wait_end"].max() - one["wait_end"].min() <= 1 * MS, one  # one finalize
        assert (one["exec_end"] <= one["wait_end"]).all(), one
        # the first bucket is launched after backward began, the wait ends before it returned
        took_ms = (one["wait_end"].max() - one["cpu_start"].min()) / MS
        assert took_ms <= max(own[rank]["backward_ns"]) / MS, (took_ms, own[rank]["backward_ns"])


def test_ddp_buckets_are_exposed_inside_backward(job):
    """A gloo DDP bucket is exposed while backward's finalize waits for it (the wrapper's wait):
    per step of the DDP loop (steps 1.. hold one backward each), the exposed time lies within the
    communication and within the backward as the program timed it, and over the loop some of it
    is exposed. (No lower bound per step: a bucket whose all-reduce the backend's thread finished
    before the rank's finalize waited for it was hidden whole, which a busy machine makes
    happen; nor from one bucket's synchronous time: a bucket launched before backward's last
    kernels overlaps them, on a busy machine almost whole.)"""
    res, own, profiler, _ = job
    if profiler != "nsys":
        pytest.skip("torch.profiler's traces hold no wait ranges")
    ov = res.overlap
    per_step = ov[(ov["scope"] == "step") & ov["step"].notna()]
    total = 0.0
    for rank in (0, 1):
        for step in range(1, len(own[rank]["backward_ns"])):
            row = per_step[(per_step["rank"] == rank) & (per_step["step"] == step)]
            assert len(row) == 1, per_step
            exposed, busy = row["exposed_ns"].iloc[0] / MS, row["comm_busy_ns"].iloc[0] / MS
            backward = own[rank]["backward_ns"][step] / MS
            assert 0 <= exposed <= min(busy, backward), (rank, step, exposed, busy, backward)
            total += exposed
    assert total > 0, per_step
