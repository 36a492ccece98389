"""The queue-aware timing model (docs/architecture.md, "Timing model") on generated reports whose
truth is exact by construction: each call's enqueue range, its completion mark on the backend's
thread (gloo) or its kernel on a stream (NCCL) are placed at known times, and the figures every
analysis reads are worked out here by hand from the construction.

gloo runs a process group's calls on two worker threads that take them from one queue in the
order enqueued: a call starts once all but one of the calls ahead of it have ended. NCCL runs a
stream's kernels one at a time. A call's latency is its execution; the time it waited in its
queue is queued_ns, beside it; a rank late to the first of several queued calls is late once.
"""

from __future__ import annotations

import pytest

import nsyscomm
from nsyscomm import nvtx_format as fmt
from nsyscomm.synth import Report, write_sqlite
from nsyscomm.synth.report import LAUNCH_DRIVER

MS = 1_000_000
US = 1_000
T0 = 1_000 * MS
BYTES = 8192


def _call(rep, proc, op, seq, start, end, *, pg=0, asy=True):
    msg = fmt.format_collective(
        op,
        api=op,
        bytes=BYTES,
        dtype="float32",
        numel=BYTES // 4,
        pg=pg,
        gsize=2,
        seq=seq,
        async_op=asy,
        step=0,
        caller="job.py:1 step",
    )
    rep.range(proc, proc.pid, start, end, registered=msg, domain=1)


def _done(rep, proc, t, op, seq, pg=0):
    # on the backend's thread (tid pid + 1), as the wrapper's future callback emits it
    rep.mark(proc, proc.pid + 1, t, registered=fmt.format_done(fmt.format_ident(op, pg, seq)), domain=1)


def _gloo_job(tmp_path, build):
    rep = Report("job.sqlite", cuda=False)
    procs = [rep.process(100 + 10 * r, "python3", {100 + 10 * r: "python3", 101 + 10 * r: "gloo"}) for r in range(2)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, T0 - MS, registered=fmt.format_rank_marker(r, r, 2, "h"), domain=1)
    build(rep, procs)
    write_sqlite(rep, tmp_path / "job.sqlite", seed=0)
    return nsyscomm.load(tmp_path / "job.sqlite", cache=False)


def _rows(res, cols="rank, seq, exec_start, exec_end, queued_ns", where="\"group\" <> '9'"):
    return {
        (r[0], r[1]): r[2:]
        for r in res.con.execute(f'SELECT {cols} FROM collectives WHERE {where} ORDER BY rank, "group", seq').fetchall()
    }


# One gloo group, two ranks. Rank 1 enqueues four async broadcasts at once (0.1 ms apart); rank
# 0 sleeps 100 ms first (LATE), then does the same. Every call's work ends (its done mark) 1 ms
# after the previous one, from 101 ms on, on both ranks.
LATE = 100 * MS
ENQ = [k * 100 * US for k in range(4)]
ENDS = [LATE + (k + 1) * MS for k in range(4)]


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    def build(rep, procs):
        for r, p in enumerate(procs):
            # a synchronous call on another group first, both ranks on time: the broadcasts are
            # no first meeting (whose skew start-up may explain)
            _call(rep, p, "all_reduce", 0, T0 - 500 * US, T0 - 400 * US, pg=9, asy=False)
            off = LATE if r == 0 else 0
            for k in range(4):
                _call(rep, p, "broadcast", k, T0 + off + ENQ[k], T0 + off + ENQ[k] + 50 * US)
                _done(rep, p, T0 + ENDS[k], "broadcast", k)

    return _gloo_job(tmp_path_factory.mktemp("queued"), build)


def test_queued_calls_start_when_a_worker_is_free(queued):
    """Calls 0 and 1 take the two workers at their enqueue; call 2 starts when call 0 ends, call 3
    when call 1 ends (or at its enqueue, where that is later). queued_ns: from the enqueue to then."""
    want = {}
    for r in (0, 1):
        off = LATE if r == 0 else 0
        starts = [off + ENQ[0], off + ENQ[1], max(off + ENQ[2], ENDS[0]), max(off + ENQ[3], ENDS[1])]
        for k in range(4):
            want[(r, k)] = (T0 + starts[k], T0 + ENDS[k], starts[k] - off - ENQ[k])
    assert _rows(queued) == want
    # rank 1's third call waited 100.8 ms in the queue behind the two calls waiting for rank 0
    assert want[(1, 2)][2] == ENDS[0] - ENQ[2] == 100_800_000


def test_latency_is_the_execution_and_queue_time_stands_beside_it(queued):
    """The summary's latency is the fastest rank's execution (1, 1.9, 2, 2 ms), not the time
    from the enqueue (which gave rank 0's third and fourth calls 2.8 and 3.7 ms); queued_ms is
    the calls' mean time in the queue."""
    (row,) = [r for r in queued.summary.to_dict("records") if r["op"] == "broadcast"]
    assert row["count"] == 4 and row["calls"] == 8
    assert row["total_ms"] == pytest.approx(1 + 1.9 + 2 + 2)
    assert row["max_ms"] == pytest.approx(2)
    assert row["queued_ms"] == pytest.approx((100.8 + 101.7 + 0.8 + 1.7) / 8)
    assert row["algbw_GBps"] == pytest.approx(BYTES / ((1 + 1.9 + 2 + 2) / 4 * MS))


def test_a_late_rank_is_late_once_not_at_every_call_queued_behind_it(queued):
    """Rank 0 arrives 100 ms late at call 0, and 0.1 ms more at call 1 (which rank 1 had enqueued
    0.1 ms after call 0): 100.1 ms of lateness in all, however many calls queued behind it."""
    late = queued.late  # the Diagnosis's late arrivals (the 0.1 ms is below their noise floor)
    assert list(zip(late["rank"], late["seq"], late["delay_ms"])) == [(0, 0, pytest.approx(100))]
    lc = queued.con.execute(
        "SELECT seq, late_ns FROM logical_collectives WHERE \"group\" = '0' ORDER BY seq"
    ).fetchall()
    assert lc == [(0, 100 * MS), (1, 100 * US), (2, 0), (3, 0)]
    (step,) = queued.steps.to_dict("records")
    assert step["late_rank"] == 0 and step["late_ms"] == pytest.approx(100.1)
    assert queued.top_skew(1).iloc[0]["seq"] == 0


def test_waiting_is_a_union_of_the_intervals_a_rank_was_blocked(queued):
    """Rank 1 waited for rank 0 in calls 0 and 1 at once (0..100 ms and 0.1..100.1 ms): 100.1 ms
    of waiting, not 200, in the per-rank table, the skew, the per-step breakdown and the
    communicator's (dimension's) figures."""
    ranks = queued.ranks.set_index("rank")
    assert ranks.loc[1, "wait_ms"] == pytest.approx(100.1)  # (the first call, on time, waited for nobody)
    assert ranks.loc[0, "wait_ms"] == pytest.approx(0)
    skew = {r["rank"]: r for r in queued.skew["per_rank"]}
    assert skew[1]["wait_ms"] == pytest.approx(100.1)
    (sb,) = queued.step_breakdown.to_dict("records")
    assert sb["wait_ms"] == pytest.approx(100.1 / 2)
    dims = queued.dimensions.set_index("group")
    assert dims.loc["0", "wait_ms"] == pytest.approx(100.1)
    # comm: rank 1 had a call in flight from 0 to 104 ms, rank 0 from 100 to 104 ms (the sum
    # of the calls' spans was 101 + 101.9 + 3 + 3 on rank 1)
    assert dims.loc["0", "comm_ms"] == pytest.approx(104 + 4)
    assert ranks["comm_ms"].sum() == pytest.approx(104 + 4 + 2 * 0.1)


def test_two_groups_do_not_queue_behind_each_other(tmp_path):
    """Three calls on group 0 (done at 10, 20, 30 ms) and one on group 1 enqueued after them
    (done at 5 ms): group 1's call runs at its enqueue, it waits in no queue of group 0's."""

    def build(rep, procs):
        for p in procs:
            for k, end in enumerate((10, 20, 30)):
                _call(rep, p, "all_reduce", k, T0 + k * 100 * US, T0 + k * 100 * US + 50 * US)
                _done(rep, p, T0 + end * MS, "all_reduce", k)
            _call(rep, p, "all_reduce", 0, T0 + 300 * US, T0 + 350 * US, pg=1)
            _done(rep, p, T0 + 5 * MS, "all_reduce", 0, pg=1)

    res = _gloo_job(tmp_path, build)
    got = _rows(res, "rank, \"group\" || '/' || seq, exec_start, exec_end, queued_ns")
    for r in (0, 1):
        assert got[(r, "1/0")] == (T0 + 300 * US, T0 + 5 * MS, 0)
        assert got[(r, "0/2")] == (T0 + 10 * MS, T0 + 30 * MS, 10 * MS - 200 * US)
        assert got[(r, "0/1")] == (T0 + 100 * US, T0 + 20 * MS, 0)


def test_nccl_kernels_on_one_stream_queue_behind_each_other(tmp_path):
    """Three async all_reduces enqueued 0.1 ms apart on one stream, whose kernels run 1-3, 3-5 and
    5-7 ms: each call's execution is its kernel (2 ms), and the time its kernel waited for the
    ones ahead of it on the stream is queued_ns (0, 2.9 and 4.8 ms)."""
    rep = Report("gpu.sqlite")
    for r in range(2):
        p = rep.process(200 + r, "python3")
        rep.domain_create(p, p.pid, T0 - 2 * MS, fmt.DOMAIN, 1)
        rep.mark(p, p.pid, T0 - MS, registered=fmt.format_rank_marker(r, r, 2, "h"), domain=1)
        for k in range(3):
            s = T0 + k * 100 * US
            launch = rep.api_call(p, p.pid, s + 10 * US, s + 20 * US, LAUNCH_DRIVER)
            _call(rep, p, "all_reduce", k, s, s + 30 * US)
            rep.kernel(
                p,
                launch["correlationId"],
                device=r,
                stream=7,
                start=T0 + (1 + 2 * k) * MS,
                end=T0 + (3 + 2 * k) * MS,
                name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            )
    write_sqlite(rep, tmp_path / "gpu.sqlite", seed=0)
    res = nsyscomm.load(tmp_path / "gpu.sqlite", cache=False)
    got = _rows(res)
    for r in (0, 1):
        for k, queued_ns in enumerate((0, 2900 * US, 4800 * US)):
            assert got[(r, k)] == (T0 + (1 + 2 * k) * MS, T0 + (3 + 2 * k) * MS, queued_ns)
    (row,) = res.summary.to_dict("records")
    assert row["total_ms"] == pytest.approx(6) and row["queued_ms"] == pytest.approx(7.7 / 3)


def test_a_synchronous_call_waits_behind_the_async_calls_ahead_of_it(tmp_path):
    """Two async calls (done at 20 and 30 ms), then a synchronous all_reduce entered at 1 ms that
    returns at 32 ms: gloo ran it after one of the two ahead had ended (20 ms), so it took 12 ms,
    not 31, and waited 19 ms in the queue."""

    def build(rep, procs):
        for p in procs:
            for k, end in enumerate((20, 30)):
                _call(rep, p, "all_reduce", k, T0 + k * 100 * US, T0 + k * 100 * US + 50 * US)
                _done(rep, p, T0 + end * MS, "all_reduce", k)
            _call(rep, p, "all_reduce", 2, T0 + 1 * MS, T0 + 32 * MS, asy=False)

    res = _gloo_job(tmp_path, build)
    got = _rows(res)
    for r in (0, 1):
        assert got[(r, 2)] == (T0 + 20 * MS, T0 + 32 * MS, 19 * MS)
