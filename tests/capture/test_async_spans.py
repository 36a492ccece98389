"""Asynchronous calls timed by their execution, on generated reports whose truth is exact by
construction: each call's enqueue range, its completion mark on the backend's thread and the
caller's wait range are placed at known times (nsyscomm/nvtx_format.py, "Completion mark")."""

from __future__ import annotations

import pandas as pd
import pytest

import nsyscomm
from nsyscomm import nvtx_format as fmt
from nsyscomm.synth import Report, write_sqlite

MS = 1_000_000
T0 = 1_000 * MS
BYTES = 4 << 20


def _call(rep, proc, op, seq, start, end, *, asy=True, peer=None, api=None, pg=0):
    msg = fmt.format_collective(
        op,
        api=api or op,
        bytes=BYTES,
        dtype="float32",
        numel=BYTES // 4,
        pg=pg,
        gsize=2,
        seq=seq,
        async_op=asy,
        step=0,
        caller="job.py:1 main",
        peer=peer,
    )
    rep.range(proc, proc.pid, start, end, registered=msg, domain=1)


def _done(rep, proc, t, op, seq, peer=None, pg=0):
    rep.mark(proc, proc.pid + 1, t, registered=fmt.format_done(fmt.format_ident(op, pg, seq, peer)), domain=1)


def _wait(rep, proc, start, end, op, seq, peer=None, pg=0):
    rep.range(proc, proc.pid, start, end, registered=fmt.format_wait(fmt.format_ident(op, pg, seq, peer)), domain=1)


def _job(tmp_path, build):
    rep = Report("job.sqlite", cuda=False)
    procs = [rep.process(100 + 10 * r, "python3", {100 + 10 * r: "python3", 101 + 10 * r: "gloo"}) for r in range(2)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, T0 - MS, registered=fmt.format_rank_marker(r, r, 2, "h"), domain=1)
    build(rep, procs)
    write_sqlite(rep, tmp_path / "job.sqlite", seed=0)
    return nsyscomm.load(tmp_path / "job.sqlite")


def _row(c, rank, seq, op="all_reduce"):
    rows = c[(c["rank"] == rank) & (c["seq"] == seq) & (c["op"] == op)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def _invariants(res):
    c = res.collectives
    assert (c["exec_end"] >= c["exec_start"]).all() and (c["duration_ns"] >= 0).all()
    assert (c["exec_start"] >= c["cpu_start"]).all()
    assert c["duration_ns"].max() <= c["exec_end"].max() - c["cpu_start"].min()  # nothing longer than the capture


def test_an_async_call_runs_until_its_completion_mark(tmp_path):
    """An all_reduce enqueued in 0.1 ms whose work completes 8 ms later on the backend's thread:
    8 ms, not 0.1 ms, in the row, the logical collective and the summary's latency and bandwidth.
    A synchronous call beside it keeps its host range."""

    def build(rep, procs):
        for r, p in enumerate(procs):
            _call(rep, p, "all_reduce", 0, T0 + r * 50_000, T0 + r * 50_000 + 100_000)
            _done(rep, p, T0 + 8 * MS + r * 10_000, "all_reduce", 0)
            _call(rep, p, "all_reduce", 1, T0 + 20 * MS, T0 + 24 * MS, asy=False)

    res = _job(tmp_path, build)
    c = res.collectives
    for r in range(2):
        a = _row(c, r, 0)
        assert a["exec_start"] == a["cpu_start"] == T0 + r * 50_000
        assert a["exec_end"] == T0 + 8 * MS + r * 10_000
        assert a["duration_ns"] == 8 * MS + r * 10_000 - r * 50_000
        assert a["cpu_end"] - a["cpu_start"] == 100_000  # the enqueue stays the host range
        s = _row(c, r, 1)
        assert (s["exec_start"], s["exec_end"]) == (s["cpu_start"], s["cpu_end"]) and s["duration_ns"] == 4 * MS
        assert pd.isna(s["wait_start"]) and pd.isna(s["wait_end"])
    lc = res.con.execute("SELECT seq, latency_ns FROM logical_collectives ORDER BY seq").fetchall()
    assert lc == [(0, 8 * MS - 40_000), (1, 4 * MS)]
    _invariants(res)


def test_a_wait_that_returns_before_the_mark_bounds_the_completion(tmp_path):
    """The mark waits for the GIL; the caller's wait returns once the work is done. The wait's
    end is the completion when it comes first, and the wait is kept as wait_start/wait_end."""

    def build(rep, procs):
        for r, p in enumerate(procs):
            _call(rep, p, "all_reduce", 0, T0, T0 + 100_000)
            _wait(rep, p, T0 + 2 * MS, T0 + 6 * MS, "all_reduce", 0)
            _done(rep, p, T0 + (9 if r == 0 else 5) * MS, "all_reduce", 0)

    res = _job(tmp_path, build)
    c = res.collectives
    r0, r1 = _row(c, 0, 0), _row(c, 1, 0)
    assert r0["exec_end"] == T0 + 6 * MS  # the wait returned first
    assert r1["exec_end"] == T0 + 5 * MS  # the mark came first
    assert (r0["wait_start"], r0["wait_end"]) == (T0 + 2 * MS, T0 + 6 * MS)
    _invariants(res)


def test_point_to_point_marks_join_by_peer(tmp_path):
    """Rank 0 receives from rank 1, which sends 30 ms later; two point-to-point calls of rank 0
    share seq 0 with different peers in another group: each takes its own mark. A mark of
    another process never joins."""

    def build(rep, procs):
        p0, p1 = procs
        _call(rep, p0, "recv", 0, T0, T0 + 100_000, peer=1, api="irecv")
        _wait(rep, p0, T0 + 200_000, T0 + 30 * MS, "recv", 0, peer=1)
        _call(rep, p1, "send", 0, T0 + 29 * MS, T0 + 29 * MS + 100_000, peer=0, api="isend")
        _wait(rep, p1, T0 + 29 * MS + 150_000, T0 + 29 * MS + 200_000, "send", 0, peer=0)
        # group 7: rank 0's all_reduce seq 0 completes at +50 ms; rank 1's mark for its own seq 0
        # (the same identity, in another process) at +90 ms
        _call(rep, p0, "all_reduce", 0, T0 + 40 * MS, T0 + 41 * MS, pg=7)
        _call(rep, p1, "all_reduce", 0, T0 + 40 * MS, T0 + 41 * MS, pg=7)
        _done(rep, p0, T0 + 50 * MS, "all_reduce", 0, pg=7)
        _done(rep, p1, T0 + 90 * MS, "all_reduce", 0, pg=7)

    res = _job(tmp_path, build)
    c = res.collectives
    recv = _row(c, 0, 0, "recv")
    assert recv["exec_end"] == T0 + 30 * MS and recv["duration_ns"] == 30 * MS
    send = _row(c, 1, 0, "send")
    assert send["exec_end"] == T0 + 29 * MS + 200_000
    g7 = c[c["group"] == "7"].set_index("rank")
    assert g7.loc[0, "exec_end"] == T0 + 50 * MS and g7.loc[1, "exec_end"] == T0 + 90 * MS
    _invariants(res)


def test_kernels_stay_the_truth_on_a_device(tmp_path):
    """A call with NCCL kernels keeps the kernels' span whatever a completion mark says (a device
    backend's future completes at the enqueue)."""
    import random

    from nsyscomm.synth import RankSim, add_rank_marker, finish_collective

    rep = Report("gpu.sqlite")
    rng = random.Random(0)
    sims = []
    for r in range(2):
        p = rep.process(200 + r, "python3")
        sim = RankSim(rep, p, rng, rank=r, device=r, start=T0)
        add_rank_marker(rep, sim, rank=r, local_rank=r, world=2, host="h")
        sims.append(sim)
    pending = [
        s.wrapper_collective(
            s.main,
            "all_reduce",
            api="all_reduce",
            nbytes=BYTES,
            dtype="float32",
            itemsize=4,
            pg=0,
            gsize=2,
            caller="job.py:1 main",
            kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            stream=7,
        )
        for s in sims
    ]
    finish_collective(pending, 2 * MS, rng)
    for s in sims:  # a mark far after the kernels: it must not move them
        rep.mark(
            s.proc,
            s.proc.pid,
            T0 + 500 * MS,
            registered=fmt.format_done(fmt.format_ident("all_reduce", 0, 0)),
            domain=1,
        )
    write_sqlite(rep, tmp_path / "gpu.sqlite", seed=0)
    c = nsyscomm.load(tmp_path / "gpu.sqlite").collectives
    assert len(c) == 2 and c["gpu_start"].notna().all()
    assert (c["exec_start"] == c["gpu_start"]).all() and (c["exec_end"] == c["gpu_end"]).all()


# ---------------------------------------------------------------- PyTorch profiler (Kineto) traces


def _kx(name, ts, dur, tid, pid=500):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _kmsg(op, seq, asy, api=None):
    return fmt.format_collective(
        op, api=api or op, bytes=BYTES, dtype="float32", numel=BYTES // 4, pg=0, gsize=2, seq=seq, async_op=asy
    )


def _trace(tmp_path, events, rank=0):
    import json

    ev = [_kx(fmt.format_rank_marker(rank, rank, 2, "h"), 10.0, 1.0, 500), *events]
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({**doc, "traceEvents": ev}))
    return path


def test_kineto_async_calls_take_gloo_worker_ranges_in_order(tmp_path):
    """Two async all_reduces enqueued back to back run one after the other on gloo's threads
    (worker tids 501, 502): each takes its own worker range, in order. A broadcast_object_list,
    synchronous, runs two gloo:broadcast inside its own range: they stay its own, and the async
    broadcast after it takes the third."""
    events = [
        _kx(_kmsg("all_reduce", 0, True), 100.0, 0.2, 500),
        _kx(_kmsg("all_reduce", 1, True), 100.5, 0.2, 500),
        _kx("gloo:all_reduce", 100.3, 7.0, 501),
        _kx("gloo:all_reduce", 107.5, 6.0, 502),
        _kx(_kmsg("broadcast", 2, False, api="broadcast_object_list"), 200.0, 30.0, 500),
        _kx("gloo:broadcast", 201.0, 5.0, 501),
        _kx("gloo:broadcast", 210.0, 15.0, 502),
        _kx(_kmsg("broadcast", 3, True, api="ddp.broadcast"), 300.0, 0.5, 500),
        _kx("gloo:broadcast", 301.0, 9.0, 501),
    ]
    res = nsyscomm.load(_trace(tmp_path, events))
    c = res.collectives.set_index("seq")
    us = 1000  # ns; the trace's ts are µs
    assert (c.loc[0, "exec_start"], c.loc[0, "exec_end"]) == (100_300, 107_300)
    assert (c.loc[1, "exec_start"], c.loc[1, "exec_end"]) == (107_500, 113_500)
    assert c.loc[2, "duration_ns"] == 30 * us  # the synchronous call keeps its range
    assert (c.loc[3, "exec_start"], c.loc[3, "exec_end"]) == (301_000, 310_000)
    assert not any("could not be paired" in w for w in res.warnings)


def test_kineto_async_calls_left_unpaired_when_the_counts_differ(tmp_path):
    """One worker range for two async calls: no pairing is sure, so none is made, and a warning says so."""
    events = [
        _kx(_kmsg("all_reduce", 0, True), 100.0, 0.2, 500),
        _kx(_kmsg("all_reduce", 1, True), 100.5, 0.2, 500),
        _kx("gloo:all_reduce", 100.3, 7.0, 501),
    ]
    res = nsyscomm.load(_trace(tmp_path, events))
    c = res.collectives
    assert (c["exec_start"] == c["cpu_start"]).all() and (c["exec_end"] == c["cpu_end"]).all()
    assert any("2 asynchronous call(s) could not be paired" in w for w in res.warnings)


def test_waiting_on_its_own_call_is_no_cause_of_lateness(tmp_path):
    """Rank 0 enqueues an async all_reduce and waits 50 ms for it in Work.wait (a
    pthread_cond_wait, as nsys -t osrt records it), then sleeps 8 ms (clock_nanosleep) and comes
    late to the next collective. The sleep is named; the wait on its own communication is not."""
    from tests.support.late_jobs import _add_osrt

    def build(rep, procs):
        p0, p1 = procs
        for r, p in enumerate(procs):
            _call(rep, p, "all_reduce", 0, T0 + r * 49 * MS, T0 + r * 49 * MS + 100_000)
            _done(rep, p, T0 + 50 * MS, "all_reduce", 0)
        _wait(rep, p0, T0 + 200_000, T0 + 50 * MS, "all_reduce", 0)
        _call(rep, p1, "all_reduce", 1, T0 + 51 * MS, T0 + 60 * MS + 100_000, asy=False)
        _call(rep, p0, "all_reduce", 1, T0 + 60 * MS, T0 + 60 * MS + 100_000, asy=False)

    res = _job(tmp_path, build)
    path = tmp_path / "job.sqlite"
    _add_osrt(
        path,
        [
            (100, T0 + 300_000, T0 + 49_900_000, "pthread_cond_wait"),
            (100, T0 + 51 * MS, T0 + 59 * MS, "clock_nanosleep"),
        ],
    )
    res = nsyscomm.load([path], cache=False)
    late = res.late.set_index("seq")
    row = late.loc[1]
    assert row["rank"] == 0 and row["cause"] == "host"
    assert "clock_nanosleep 8.0 ms" in row["detail"] and "pthread_cond_wait" not in row["detail"]


def test_an_async_call_is_exposed_only_while_its_caller_waits(tmp_path):
    """An 8 ms all_reduce the caller overlapped with 6 ms of its own work, then waited 2 ms for:
    2 ms exposed, not 8 (step 0, both ranks alike)."""

    def build(rep, procs):
        for p in procs:
            _call(rep, p, "all_reduce", 0, T0, T0 + 100_000)
            _wait(rep, p, T0 + 6 * MS, T0 + 8 * MS, "all_reduce", 0)
            _done(rep, p, T0 + 8 * MS, "all_reduce", 0)

    res = _job(tmp_path, build)
    b = res.step_breakdown
    assert len(b) == 1
    assert b["exposed_ms"].iloc[0] == pytest.approx(2.0) and b["wait_ms"].iloc[0] == pytest.approx(0.0)


SEND_WAIT_END = T0 + 300 * MS + 50_000  # rank 0 waits for its isend 300 ms after the enqueue


@pytest.mark.parametrize(
    "recv, send_end",
    [
        # a synchronous receive returns when the data is there: the send was done by then
        ("recv", T0 + 5 * MS),
        # an irecv's end is the end of its caller's wait, or its completion mark
        ("irecv_waited", T0 + 6 * MS),
        ("irecv_marked", T0 + 4 * MS),
        # an irecv with neither ends at its enqueue, which says nothing of the data: no bound
        ("irecv_unseen", SEND_WAIT_END),
        # a receive that ended before its send began: the ranks' clocks disagree, no bound
        ("clocks_disagree", SEND_WAIT_END),
    ],
)
def test_a_send_without_a_future_ends_by_its_receive(tmp_path, recv, send_end):
    """gloo's send Work has no future: no completion mark, so the send ends at its caller's
    wait, here 300 ms after the message was delivered. Its execution ends no later than its
    receive's, where the receive's end is a completion."""

    def build(rep, procs):
        p0, p1 = procs
        _call(rep, p0, "send", 0, T0, T0 + 100_000, peer=1, api="isend")
        _wait(rep, p0, T0 + 300 * MS, SEND_WAIT_END, "send", 0, peer=1)
        if recv == "recv":
            _call(rep, p1, "recv", 0, T0 + MS, T0 + 5 * MS, asy=False, peer=0, api="recv")
        elif recv == "clocks_disagree":
            _call(rep, p1, "recv", 0, T0 - 10 * MS, T0 - 5 * MS, asy=False, peer=0, api="recv")
        else:
            _call(rep, p1, "recv", 0, T0 + MS, T0 + MS + 100_000, peer=0, api="irecv")
            if recv == "irecv_waited":
                _wait(rep, p1, T0 + 2 * MS, T0 + 6 * MS, "recv", 0, peer=0)
            elif recv == "irecv_marked":
                _done(rep, p1, T0 + 4 * MS, "recv", 0, peer=0)

    res = _job(tmp_path, build)
    c = res.collectives
    send, got_recv = _row(c, 0, 0, "send"), _row(c, 1, 0, "recv")
    assert send["logical_id"] == got_recv["logical_id"]
    assert send["exec_start"] == T0 and send["exec_end"] == send_end
    assert send["duration_ns"] == send_end - T0
    assert send["wait_end"] == SEND_WAIT_END  # the caller still waited until then
    ranks = res.ranks.set_index("rank")
    assert ranks.loc[0, "comm_ms"] == pytest.approx((send_end - T0) / MS, abs=1e-9)
    _invariants(res)
