"""The Perfetto trace draws an asynchronous call by its execution, on a generated report whose
truth is exact by construction: each call's enqueue range, its completion mark on the backend's
thread and the caller's wait range are placed at known times. The trace is checked against the
`collectives` table read with plain SQL and against the construction itself."""

from __future__ import annotations

import pytest

import nsyscomm
from nsyscomm.synth import Report, write_sqlite
from nsyscomm.views import trace as tr
from tests.support import async_jobs

from .test_trace import validate

MS = 1_000_000
T0 = 1_000 * MS
BYTES = 4 << 20


def _call(rep, proc, op, seq, start, end, *, asy=True):
    async_jobs.enqueue(rep, proc, op, seq, start, end, nbytes=BYTES, step=0, caller="job.py:1 main", async_op=asy)


# construction: (rank, op, seq) -> the execution span nsyscomm must find (docs/architecture.md,
# "Timing model": from the enqueue's start to the earlier of the done mark and the wait's end)
TRUTH = {
    (0, "all_reduce", 0): (T0, T0 + 6 * MS),  # the wait returned before the mark
    (1, "all_reduce", 0): (T0 + 50_000, T0 + 8 * MS + 10_000),  # no wait: the mark
    (0, "broadcast", 2): (T0 + 30 * MS, T0 + 37 * MS),
    (1, "broadcast", 2): (T0 + 30 * MS, T0 + 37 * MS),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Two ranks: an async all_reduce (rank 0 waits for it in Work.wait from 2 to 6 ms), a
    synchronous all_reduce, and an async broadcast nobody waits for (as DDP's buckets)."""
    tmp = tmp_path_factory.mktemp("trace_async")
    rep = Report("job.sqlite", cuda=False)
    procs = async_jobs.gloo_ranks(rep)
    for r, p in enumerate(procs):
        _call(rep, p, "all_reduce", 0, T0 + r * 50_000, T0 + r * 50_000 + 100_000)
        async_jobs.done(rep, p, T0 + 8 * MS + r * 10_000, "all_reduce", 0)
        _call(rep, p, "all_reduce", 1, T0 + 20 * MS, T0 + 24 * MS, asy=False)
        _call(rep, p, "broadcast", 2, T0 + 30 * MS, T0 + 30 * MS + 200_000)
        async_jobs.done(rep, p, T0 + 37 * MS, "broadcast", 2)
    async_jobs.wait(rep, procs[0], T0 + 2 * MS, T0 + 6 * MS, "all_reduce", 0)
    write_sqlite(rep, tmp / "job.sqlite", seed=0)
    res = nsyscomm.load(tmp / "job.sqlite")
    table = {
        (r[0], r[1], r[2]): r[3:]
        for r in res.con.execute(
            "SELECT rank, op, seq, cpu_start, cpu_end, exec_start, exec_end, wait_start, wait_end FROM collectives"
        ).fetchall()
    }
    return tr.build(res), table


def _ns(us: float, origin: int) -> int:
    return round(us * 1000) + origin  # the trace's µs keep three decimals: whole ns


def _slices(doc, cat):
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == cat:
            key = (e["pid"], e["args"]["op"], e["args"]["seq"])
            assert key not in out, key
            out[key] = e
    return out


def _span(e, origin):
    return _ns(e["ts"], origin), _ns(e["ts"] + e["dur"], origin)


def test_the_table_holds_the_constructed_spans(job):
    _, table = job
    for key, span in TRUTH.items():
        assert table[key][2:4] == span, key


def test_a_call_is_drawn_as_its_execution_and_its_enqueue_as_its_launch(job):
    doc, table = job
    validate(doc)
    origin = doc["otherData"]["time_origin_ns"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    calls, launches = _slices(doc, "collective"), _slices(doc, "collective_launch")
    assert len(calls) == len(table) == 6
    for key, (cpu_start, cpu_end, exec_start, exec_end, _, _) in table.items():
        call = calls[key]
        assert _span(call, origin) == (exec_start, exec_end), key
        if key in TRUTH:  # asynchronous: its execution on the rank's communication track
            assert names[(call["pid"], call["tid"])].startswith("communication")
            launch = launches[key]
            assert _span(launch, origin) == (cpu_start, cpu_end), key
            assert names[(launch["pid"], launch["tid"])].startswith("CPU thread")
            assert launch["args"]["exec_start"] == exec_start and launch["args"]["exec_end"] == exec_end
        else:  # synchronous: its host range on its thread, no launch of its own
            assert (exec_start, exec_end) == (cpu_start, cpu_end) == (T0 + 20 * MS, T0 + 24 * MS)
            assert names[(call["pid"], call["tid"])].startswith("CPU thread") and key not in launches
    assert set(launches) == set(TRUTH)


def test_a_flow_links_each_launch_to_its_execution(job):
    doc, _ = job
    calls, launches = _slices(doc, "collective"), _slices(doc, "collective_launch")
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s" and e["cat"] == "launch"}
    finishes = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f" and e["cat"] == "launch"}
    assert set(starts) == set(finishes) and len(starts) == len(TRUTH) == doc["otherData"]["launch_flows"]

    def inside(point, e):
        return (point["pid"], point["tid"]) == (e["pid"], e["tid"]) and e["ts"] <= point["ts"] <= e["ts"] + e["dur"]

    linked = set()
    for fid, s in starts.items():
        f = finishes[fid]
        key = next(k for k, e in launches.items() if inside(s, e))
        assert inside(f, calls[key]) and f["bp"] == "e" and s["ts"] <= f["ts"]
        linked.add(key)
    assert linked == set(TRUTH)


def test_the_callers_wait_is_its_own_slice(job):
    doc, table = job
    origin = doc["otherData"]["time_origin_ns"]
    waits = _slices(doc, "collective_wait")
    assert set(waits) == {(0, "all_reduce", 0)}  # only rank 0 waited, only for that call
    wait = waits[(0, "all_reduce", 0)]
    assert _span(wait, origin) == table[(0, "all_reduce", 0)][4:6] == (T0 + 2 * MS, T0 + 6 * MS)
    launch = _slices(doc, "collective_launch")[(0, "all_reduce", 0)]
    assert (wait["pid"], wait["tid"]) == (launch["pid"], launch["tid"])  # on the calling thread


def test_calls_in_flight_count_the_execution(job):
    """Between the enqueue's end (0.1 ms) and the completion, the all_reduce is in flight."""
    doc, _ = job
    origin = doc["otherData"]["time_origin_ns"]
    counts = sorted(
        (_ns(e["ts"], origin), e["args"]["calls"])
        for e in doc["traceEvents"]
        if e["ph"] == "C" and e["name"] == "calls in flight" and e["pid"] == 0
    )
    at = [n for t, n in counts if t <= T0 + 3 * MS][-1]
    assert at == 1
