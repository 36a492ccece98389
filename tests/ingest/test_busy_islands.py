"""busy.islands(): the compute kernels' busy islands per (pid, device), made a slice of the
report's kernels at a time (one pair's kernels at once when they are not in start order) so that
its temporaries are not the report's; the same islands whatever the route (slices, one pair at a
time, one sort of all, integers of any width)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from nsyscomm.ingest import busy, compute_columns


def _kernels(rng, n: int, pairs: int, dtype=np.int32) -> dict:
    """n kernels over `pairs` (pid, device) pairs in no order: back-to-back, overlapping, nested
    and identical ones, with gaps; devices -1 (none) among them."""
    start = np.cumsum(rng.choice([0, 0, 1, 5, 40, 300], size=n)).astype(np.int64)
    length = rng.choice([0, 1, 5, 50, 400], size=n).astype(np.int64)
    pair = rng.integers(0, pairs, size=n)
    return {
        "pid": (1000 + pair // 4).astype(dtype),
        "device": (pair % 4 - 1).astype(dtype),
        "start": start,
        "end": start + length,
    }


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        for x, y in zip(a[k], b[k]):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("seed", range(3))
def test_one_pair_at_a_time_equals_one_sort_of_all(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    k = _kernels(rng, 20_000, 12)
    per_pair = busy.islands(k)
    assert len(per_pair) == 12 and all(len(s) for s, _, _ in per_pair.values())
    # the same kernels as int64, and as a DataFrame-like float device with NaN for none
    wide = {n: a.astype(np.int64) for n, a in k.items()}
    _same(per_pair, busy.islands(wide))
    floats = dict(wide, device=np.where(k["device"] < 0, np.nan, k["device"]).astype(float))
    _same(per_pair, busy.islands(floats))
    monkeypatch.setattr(busy, "PAIRS_ONE_AT_A_TIME", 2)  # past it (3 processes): one sort of all
    _same(per_pair, busy.islands(k))
    # and the island lengths add up to the union of each pair's kernels
    for (pid, dev), (s, e, before) in per_pair.items():
        rows = (k["pid"] == pid) & (k["device"] == dev)
        covered = np.zeros(int(k["end"].max()) + 1, dtype=bool)
        for a, b in zip(k["start"][rows], k["end"][rows]):
            covered[a:b] = True
        assert int(before[-1] + e[-1] - s[-1]) == int(covered.sum())


def test_ids_past_32_bits():
    rng = np.random.default_rng(7)
    k = _kernels(rng, 5000, 8, np.int64)
    k["pid"] = k["pid"] + (1 << 40)
    got = busy.islands(k)
    assert {p for p, _ in got} == {int(p) for p in np.unique(k["pid"])}
    shifted = dict(k, pid=k["pid"] - (1 << 40))
    _same({(p - (1 << 40), d): v for (p, d), v in got.items()}, busy.islands(shifted))


def test_temporaries_are_one_pairs_kernels():
    """8 processes of 250k overlapping kernels (few islands), as the C scan hands them over (int32
    ids): islands() allocates at its peak far less than the 49 bytes a kernel that one sort of
    all of them took (its order, the pairs' codes, the kernels' sorted copies)."""
    rng = np.random.default_rng(3)
    n = 2_000_000
    start = np.sort(rng.integers(0, n * 10, size=n))
    k = {
        "pid": np.repeat(np.arange(8, dtype=np.int32), n // 8),
        "device": np.zeros(n, dtype=np.int32),
        "start": start,
        "end": start + 1000,  # each overlaps the next: islands are few
    }
    tracemalloc.start()
    try:
        got = busy.islands(k)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(got) == 8
    assert peak / n < 15, f"{peak / n:.1f} bytes a kernel"


@pytest.mark.parametrize("seed", range(3))
def test_kernels_read_a_slice_at_a_time_give_the_same_islands(seed, monkeypatch):
    """Kernels in start order (as nsys exports them), a process's devices interleaved, ties,
    nested kernels and islands that span slices: the islands made a slice of the report at a
    time, down to one kernel, are those of one sort of all; kernels out of start order too."""
    rng = np.random.default_rng(seed)
    k = _kernels(rng, 3000, 6)
    k["end"][::97] = k["start"][::97] - 3  # a damaged kernel ending before it starts
    order = rng.permutation(len(k["start"]))
    shuffled = {c: a[order] for c, a in k.items()}
    for kernels in (k, shuffled):
        whole = busy._islands_sorted(*(busy.ints(kernels[c]) for c in ("pid", "device", "start", "end")))
        for size in (1, 2, 3, 7, 100, 5000):
            monkeypatch.setattr(busy, "SLICE", size)
            _same(busy.islands(kernels), whole)


def _edges(rng, n: int, hi: int) -> pa.Table:
    """Calls on the kernels' processes and devices, on a process without kernels and without a
    known process or device, some without a GPU end."""
    s = rng.integers(-50, hi + 50, size=n)
    e = s + rng.integers(0, 500, size=n)
    return pa.table(
        {
            "pid": pa.array(rng.choice([1000, 1001, 1002, 1003, -1], size=n)),
            "device": pa.array(rng.choice([-1, 0, 1, 2], size=n)),
            "gpu_start": pa.array(s),
            "gpu_end": pa.array(e, mask=rng.random(n) < 0.1),
        }
    )


@pytest.mark.parametrize("seed", range(3))
def test_islands_made_a_process_at_a_time_give_the_same_busy_times(seed, monkeypatch):
    """busy_at_edges() over islands_by_process(): the busy times of islands() made whole, with
    one process's islands held at any time, every process's in turn."""
    rng = np.random.default_rng(seed)
    k = _kernels(rng, 5000, 12)  # processes 1000-1002, devices -1 to 2
    calls = _edges(rng, 3000, int(k["end"].max()))
    whole = busy.busy_at_edges(calls, busy.islands(k))
    by_process = busy.islands_by_process(k)
    assert isinstance(by_process, busy.IslandsByProcess)
    held = []
    real = busy._busy_at
    monkeypatch.setattr(busy, "_busy_at", lambda t, *i: held.append({p for p, _ in by_process._pairs}) or real(t, *i))
    got = busy.busy_at_edges(calls, by_process)
    assert got.equals(whole)
    assert len(held) > 12 and all(len(h) == 1 for h in held), held
    assert {next(iter(h)) for h in held} == {1000, 1001, 1002}
    assert pc.sum(got["busy_at_end"]).as_py() > 0  # not a comparison of zeros
    # past PAIRS_ONE_AT_A_TIME processes: islands() whole
    monkeypatch.setattr(busy, "PAIRS_ONE_AT_A_TIME", 2)
    _same(busy.islands_by_process(k), busy.islands(k))


@pytest.mark.parametrize("shuffle", [False, True])
def test_narrow_kernels_read_each_start_back_once(shuffle, monkeypatch):
    """Kernels held narrow (compute_columns.narrow: a start an offset from its block's base, an
    end a duration): the islands made a process at a time take each kernel's end from its start
    just read back, not from KernelEnds, which reads the start back a second time; the islands
    are those of the wide kernels, in start order or not."""
    rng = np.random.default_rng(5)
    k = _kernels(rng, 20_000, 6)
    if shuffle:
        order = rng.permutation(len(k["start"]))
        k = {c: a[order] for c, a in k.items()}
    narrow = compute_columns.narrow(dict(k))
    assert "start_offset" in narrow and "duration" in narrow
    ends_read = []
    real = compute_columns.KernelEnds.__getitem__
    monkeypatch.setattr(compute_columns.KernelEnds, "__getitem__", lambda s, at: ends_read.append(1) or real(s, at))
    monkeypatch.setattr(busy, "SLICE", 4096)
    by_process = busy.islands_by_process(narrow)
    assert isinstance(by_process, busy.IslandsByProcess)
    got = {}
    for p in by_process.pids:
        got.update(by_process.of(int(p)))
    assert not ends_read
    _same(got, busy._islands_sorted(*(busy.ints(k[c]) for c in ("pid", "device", "start", "end"))))
