"""nsyscomm.ingest.compute_columns: the compute kernels' columns held narrower, exactly. The
busy islands and the kernels in each call's gap made of the narrow columns equal those made of
the C scan's widths, on kernels with known values, and a column whose values do not fit a
narrower type stays as it is."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from nsyscomm.ingest import busy, compute_columns
from nsyscomm.ingest.nsys import gap_kernels

WIDE = {"pid": np.int32, "device": np.int32, "start": np.int64, "end": np.int64, "name": np.int32}


def _kernels(n=5000, seed=1, devices=(0, 3, 7), long_ns=0):
    """n kernels in start order on two processes and three devices, some overlapping, some
    unnamed (-1); long_ns: the last kernel's duration."""
    rng = np.random.default_rng(seed)
    start = np.cumsum(rng.integers(0, 3000, n)).astype(np.int64) + 10**12
    end = start + rng.integers(1, 5000, n)
    end[-1] = start[-1] + (long_ns or 1)
    cols = {
        "pid": rng.choice([4_000_123, 4_000_777], n),
        "device": rng.choice(devices, n),
        "start": start,
        "end": end,
        "name": rng.choice([-1, 5, 9, 40_000], n),
    }
    return {c: a.astype(WIDE[c]) for c, a in cols.items()}


def _calls(kernels, n=100):
    """Calls on each (pid, device) pair at every n-th kernel's start, 100 ns long."""
    at = np.arange(0, len(kernels["start"]), n)
    return pa.table(
        {
            "pid": kernels["pid"][at].astype(np.int64),
            "device": kernels["device"][at].astype(np.int64),
            "gpu_start": kernels["start"][at],
            "gpu_end": kernels["start"][at] + 100,
        }
    )


def _islands(compute):
    by = busy.islands_by_process(dict(compute))
    return {pair: [a.tolist() for a in by[pair]] for pair in sorted(busy.islands(dict(compute)))}


@pytest.mark.parametrize("one_at_a_time", [True, False])
def test_narrow_columns_give_the_islands_and_gaps_of_the_wide_ones(monkeypatch, one_at_a_time):
    """A process at a time, or past PAIRS_ONE_AT_A_TIME processes one sort of every kernel."""
    if not one_at_a_time:
        monkeypatch.setattr(busy, "PAIRS_ONE_AT_A_TIME", 1)
    wide = _kernels()
    narrow = compute_columns.narrow(dict(wide))
    assert {c: a.dtype for c, a in narrow.items()} == {
        "pid": np.int32,
        "device": np.int8,
        "start_base": np.int64,
        "start_offset": np.uint32,
        "duration": np.uint32,
        "name": np.int32,
    }
    starts = compute_columns.starts(narrow)
    assert len(narrow["start_base"]) == -(-len(wide["start"]) // (1 << compute_columns.BLOCK_BITS))
    assert (starts[:] == wide["start"]).all() and (starts[[5, 4096, 4097]] == wide["start"][[5, 4096, 4097]]).all()
    assert (compute_columns.KernelEnds(narrow, starts)[3:9000] == wide["end"][3:9000]).all()
    assert _islands(narrow) == _islands(wide)
    calls = _calls(wide)
    made = gap_kernels.top_in_gaps(calls, narrow, slice_kernels=1000)
    assert len(made) > 60
    assert made.equals(gap_kernels.top_in_gaps(calls, wide, slice_kernels=1000))


@pytest.mark.parametrize("long_ns", [1 << 32, -1])
def test_an_end_whose_duration_does_not_fit_stays_as_it_is(long_ns):
    """A kernel of 4.29 s or more (or ending before it starts, a damaged report): the ends kept
    as int64, the same islands."""
    wide = _kernels(long_ns=long_ns)
    narrow = compute_columns.narrow(dict(wide))
    assert "duration" not in narrow and narrow["end"] is wide["end"]
    assert _islands(narrow) == _islands(wide)


def test_ids_take_the_narrowest_type_that_holds_them():
    wide = _kernels(devices=(-1, 0, 300))
    narrow = compute_columns.narrow(dict(wide))
    assert narrow["device"].dtype == np.int16 and (narrow["device"] == wide["device"]).all()
    assert narrow["pid"].dtype == np.int32
    empty = compute_columns.narrow({c: np.array([], t) for c, t in WIDE.items()})
    assert empty["duration"].dtype == np.uint32 and not len(empty["pid"]) and not compute_columns.count(empty)


def test_starts_whose_block_spans_past_32_bits_stay_as_they_are():
    """A block of kernels whose starts span 4.29 s or more: the starts kept as int64, the same
    islands."""
    wide = _kernels()
    wide["start"][100:] += 1 << 32
    wide["end"][100:] += 1 << 32
    narrow = compute_columns.narrow(dict(wide))
    assert "start_offset" not in narrow and narrow["start"] is wide["start"] and "duration" in narrow
    assert _islands(narrow) == _islands(wide)
