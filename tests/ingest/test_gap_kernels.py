"""nsyscomm.ingest.nsys.gap_kernels: the compute kernels queued ahead of each call, by name. Ground
truth by construction: kernels placed around three calls on one device, with the ones that must
not count (before the first call, overlapping the previous call, on another device, unnamed)."""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa
import pytest

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


def _oracle(calls: pa.Table, k: dict) -> list[tuple]:
    """top_in_gaps() row by row in plain Python: per (pid, device), its calls by start (a tie in
    their order); a named kernel belongs to the first call starting at or after its end, when the
    call before that one ended before the kernel began; per call the TOP names by summed time, a
    tie in the order the names first came in the kernels' order."""
    rows = [r for r in calls.to_pylist() if r["gpu_start"] is not None and r["gpu_end"] is not None]
    out = []
    for pid, dev in sorted({(r["pid"], r["device"]) for r in rows}):
        mine = sorted((r for r in rows if (r["pid"], r["device"]) == (pid, dev)), key=lambda r: r["gpu_start"])
        starts = [r["gpu_start"] for r in mine]
        sums: dict[int, dict[int, list[int]]] = {}
        for i in range(len(k["start"])):
            if (k["pid"][i], k["device"][i]) != (pid, dev) or k["name"][i] < 0:
                continue
            j = bisect.bisect_left(starts, k["end"][i])
            if 0 < j < len(mine) and k["start"][i] >= mine[j - 1]["gpu_end"]:
                s = sums.setdefault(j, {}).setdefault(int(k["name"][i]), [0, 0, i])
                s[0] += int(k["end"][i] - k["start"][i])
                s[1] += 1
        for j in sorted(sums):
            top = sorted(sums[j].items(), key=lambda kv: (-kv[1][0], kv[1][2]))[: gk.TOP]
            out += [(pid, dev, starts[j], name, ns, count) for name, (ns, count, _) in top]
    return out


def _random_job(seed: int, pairs: int = 3, calls: int = 12):
    """Calls of several (pid, device) pairs and their kernels interleaved in start order, as nsys
    exports them: gaps of many kernels, names that tie, kernels overlapping each other and the
    calls, unnamed ones, calls with the same start, back-to-back calls without a gap, a call
    without a GPU time."""
    rng = np.random.default_rng(seed)
    crows, k = [], []
    for p in range(pairs):
        pid, dev = 100 + p // 2, p % 2
        t = 0
        for _ in range(calls):
            t += int(rng.choice([0, 0, 5, 40, 200]))  # 0: no gap, or the same start as the call before
            length = int(rng.integers(0, 30))
            crows.append((pid, dev, t, t + length))
            gap_end = t + length + int(rng.choice([0, 3, 60, 300]))
            for _ in range(int(rng.integers(0, 25))):  # kernels from inside the call to past the next one
                s = int(rng.integers(t, gap_end + 1))
                k.append((pid, dev, s, s + int(rng.choice([0, 1, 2, 10, 50])), int(rng.integers(-1, 6))))
            t += length
    crows.append((100, 0, None, None))
    rng.shuffle(crows)
    k.sort(key=lambda r: r[2])  # a stable sort: kernels of one start in the order they were made
    pid, dev, s, e, name = (np.array(c, dtype=np.int64) for c in zip(*k))
    compute = {"pid": pid.astype(np.int32), "device": dev.astype(np.int32), "start": s, "end": e}
    compute["name"] = name.astype(np.int32)
    c_pid, c_dev, c_s, c_e = zip(*crows)
    calls = pa.table(
        {
            "pid": pa.array(c_pid, pa.int64()),
            "device": pa.array(c_dev, pa.int64()),
            "gpu_start": pa.array(c_s, pa.int64()),
            "gpu_end": pa.array(c_e, pa.int64()),
        }
    )
    return calls, compute


def _rows(df) -> list[tuple]:
    return [tuple(int(v) for v in r) for r in df[gk.COLUMNS].itertuples(index=False)]


@pytest.mark.parametrize("seed", range(6))
def test_kernels_read_a_slice_at_a_time_give_the_whole_result(seed):
    """The rows are the same, in the same order, whatever the slice of kernels looked at a time:
    one kernel (every call's gap cut at each of its kernels), a few, or all of them."""
    calls, compute = _random_job(seed)
    want = _oracle(calls, compute)
    assert len(want) > 20  # the job has gaps, and ties among their names' times
    for size in (1, 2, 3, 7, 64, len(compute["start"])):
        for threads in (1, 3):
            got = gk.top_in_gaps(calls, compute, threads=threads, slice_kernels=size)
            assert _rows(got) == want, (size, threads)


def test_kernels_out_of_start_order_give_the_same_result():
    """A report whose kernels are not in start order: a pair whose gap kernels come back to a call
    already written is worked on whole, with the same rows."""
    calls, compute = _random_job(7)
    order = np.random.default_rng(7).permutation(len(compute["start"]))
    shuffled = {c: a[order] for c, a in compute.items()}
    want = _oracle(calls, shuffled)
    assert _rows(gk.top_in_gaps(calls, shuffled, slice_kernels=5)) == want
    assert _rows(gk.top_in_gaps(calls, shuffled)) == want


def test_the_rows_are_as_narrow_as_their_values():
    """Process, device, name id and count as int32 (the C scan's widths), the times as int64:
    combine casts them to the declared types."""
    calls, compute = _random_job(1)
    got = gk.top_in_gaps(calls, compute)
    assert dict(got.dtypes.astype(str)) == {
        "pid": "int32",
        "device": "int32",
        "gpu_start": "int64",
        "name_id": "int32",
        "ns": "int64",
        "count": "int32",
    }
    assert dict(gk.top_in_gaps(calls, {c: a[:0] for c, a in compute.items()}).dtypes) == dict(got.dtypes)


@pytest.mark.parametrize("shuffled", [False, True])
def test_the_narrow_kernels_give_the_rows_of_the_wide_ones(shuffled):
    """The compute kernels as the extraction holds them (compute_columns.narrow: starts as offsets
    from a block's base, ends as durations), in start order or not (each pair's kernels then
    worked on whole), give the rows of their wide columns."""
    from nsyscomm.ingest import compute_columns

    calls, compute = _random_job(3)
    if shuffled:
        order = np.random.default_rng(3).permutation(len(compute["start"]))
        compute = {c: a[order] for c, a in compute.items()}
    want = _rows(gk.top_in_gaps(calls, compute, slice_kernels=5))
    narrow = compute_columns.narrow(dict(compute))
    assert "duration" in narrow and "start_offset" in narrow  # the narrow form, not the wide one
    for threads in (1, 3):
        assert _rows(gk.top_in_gaps(calls, narrow, threads=threads, slice_kernels=5)) == want
