"""nsyscomm.ingest.nsys.gap_kernels: the compute kernels queued ahead of each call, by name. Ground
truth by construction: kernels placed around three calls on one device, with the ones that must
not count (before the first call, overlapping the previous call, on another device, unnamed)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from nsyscomm.ingest.nsys import gap_kernels as gk


def _calls(rows):
    pid, dev, s, e = zip(*rows)
    return pa.table({"pid": list(pid), "device": list(dev), "gpu_start": list(s), "gpu_end": list(e)})


def test_kernels_between_calls_are_summed_per_name_and_cut_to_the_top():
    # pid 7, device 0: calls at [100,110], [200,210], [300,310]; pid 7 device 1: one call [150,160]
    calls = _calls([(7, 0, 100, 110), (7, 0, 200, 210), (7, 0, 300, 310), (7, 1, 150, 160)])
    k = []  # pid, device, start, end, name

    def add(dev, s, e, name):
        k.append((7, dev, s, e, name))

    add(0, 10, 50, 1)  # before the first call: no previous call, not counted
    add(0, 105, 130, 1)  # began during call 1: overlapped it, not counted
    add(0, 120, 140, 1)  # gap of call 2: name 1, 20
    add(0, 150, 160, 1)  # gap of call 2: name 1, 10 more (two kernels)
    add(0, 160, 195, 2)  # gap of call 2: name 2, 35
    add(0, 170, 200, 3)  # ends at call 2's start: in its gap, name 3, 30
    add(0, 190, 205, 4)  # ends after call 2 began: call 3 is next, but it began before call 2 ended
    add(1, 120, 140, 9)  # device 1: its only call has no previous one
    add(0, 220, 230, -1)  # unnamed
    for i in range(gk.TOP + 2):  # gap of call 3: TOP + 2 names, 10 + i ns each
        add(0, 240 + 5 * i, 250 + 6 * i, 100 + i)
    pid, dev, s, e, name = (np.array(c, dtype=np.int64) for c in zip(*k))
    out = gk.top_in_gaps(calls, {"pid": pid, "device": dev, "start": s, "end": e, "name": name})
    call2 = out[out.gpu_start == 200].set_index("name_id")
    assert call2["ns"].to_dict() == {2: 35, 3: 30, 1: 30}
    assert call2.loc[1, "count"] == 2
    call3 = out[out.gpu_start == 300]
    assert list(call3["name_id"]) == [100 + i for i in range(gk.TOP + 1, 1, -1)]  # the longest TOP
    assert list(call3["ns"]) == [10 + i for i in range(gk.TOP + 1, 1, -1)]
    assert set(out.gpu_start) == {200, 300} and set(out.device) == {0} and set(out.pid) == {7}


def test_no_kernels_or_no_gpu_calls_give_an_empty_frame():
    calls = _calls([(7, 0, 100, 110)])
    empty = {n: np.array([], np.int64) for n in ("pid", "device", "start", "end", "name")}
    assert gk.top_in_gaps(calls, empty).empty
    cpu_only = pa.table(
        {
            "pid": [7],
            "device": pa.array([None], pa.int64()),
            "gpu_start": pa.array([None], pa.int64()),
            "gpu_end": pa.array([None], pa.int64()),
        }
    )
    one = {
        "pid": np.array([7]),
        "device": np.array([0]),
        "start": np.array([1]),
        "end": np.array([2]),
        "name": np.array([1]),
    }
    assert gk.top_in_gaps(cpu_only, one).empty
    assert list(gk.top_in_gaps(calls, one).columns) == gk.COLUMNS


def test_pairs_worked_on_by_several_threads_give_each_its_own_kernels():
    """Four processes, their kernels interleaved in one array: each (pid, device) pair's call
    gets its own kernels' sums whether the pairs are worked on one at a time or three at once,
    and the rows come out in the same order."""
    pids = [11, 7, 9, 8]
    calls = _calls([(p, 0, t0, t0 + 10) for p in pids for t0 in (100, 200)])
    k = []
    for n in range(40):  # kernel n of every process, in the gap of its second call: name pid*100 + n % 4
        for p in pids:
            k.append((p, 0, 110 + 2 * n, 111 + 2 * n + (p % 3), p * 100 + n % 4))
    pid, dev, s, e, name = (np.array(c, dtype=np.int64) for c in zip(*k))
    compute = {"pid": pid, "device": dev, "start": s, "end": e, "name": name}
    one, three = gk.top_in_gaps(calls, compute), gk.top_in_gaps(calls, compute, threads=3)
    assert one.equals(three)
    for p in pids:
        rows = three[three.pid == p].set_index("name_id")
        assert set(rows.gpu_start) == {200}
        assert rows["ns"].to_dict() == {p * 100 + m: 10 * (1 + p % 3) for m in range(4)}
        assert rows["count"].to_dict() == {p * 100 + m: 10 for m in range(4)}
