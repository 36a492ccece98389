"""The compute kernels' columns held narrower than the C scan reads them
(nsyscomm.ingest.nsys.reader), and read back exactly.

They are held from the scan until the busy islands and the kernels in each call's gap are
made, after the calls (nsyscomm.ingest.busy, nsyscomm.ingest.nsys.gap_kernels): across the
extraction's peak, while the calls are made. narrow() makes them so; starts() and KernelEnds read
the times back as int64 where they are used, from the narrow form or the wide one (pid, device,
start, end, name; a DataFrame too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

SLICE = 1 << 18  # kernels made narrower at a time: what the temporaries scale with
# kernels whose starts share one base (start_base): 8 bytes per 4,096 kernels
BLOCK_BITS = 12
_U32 = int(np.iinfo(np.uint32).max)


def narrow(compute: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The compute kernels' columns (pid, device, start, end, name) as narrow as their values
    allow, exactly: pid, device and name in the narrowest of int8, int16 and int32 that holds
    them; the end as the kernel's duration (column duration, uint32: up to 4.29 s) when every
    kernel's fits, else as it is; the start as a uint32 offset (start_offset) from the first
    start of its block of 2**BLOCK_BITS kernels (start_base, int64) when every block's starts
    span less than 4.29 s, else as it is: 11 to 20 bytes a kernel where the times fit, against
    the C scan's 28.
    compute is emptied as its columns are made narrower, so that each wide one is let go of then
    (the C scan's buffers are held by their arrays alone); the times are made a slice at a time."""
    out = {}
    for n in [n for n in compute if n not in ("start", "end")]:
        out[n] = _narrowest(compute.pop(n))
    start, end = compute.pop("start"), compute.pop("end")
    duration = _offsets(end, start)
    if duration is None:
        out["end"] = end
    else:
        out["duration"] = duration
    del end
    base = np.minimum.reduceat(start, np.arange(0, len(start), 1 << BLOCK_BITS)) if len(start) else start[:0]
    offset = _offsets(start, base, blocks=True)
    if offset is None:
        out["start"] = start
    else:
        out["start_base"], out["start_offset"] = base, offset
    return out


def _offsets(a: np.ndarray, base: np.ndarray, blocks: bool = False) -> np.ndarray | None:
    """a - base (base: per kernel, or per block of kernels) as uint32, None when some do not fit."""
    out = np.empty(len(a), dtype=np.uint32)
    for lo in range(0, len(a), SLICE):
        hi = min(lo + SLICE, len(a))
        d = a[lo:hi] - (base[np.arange(lo, hi) >> BLOCK_BITS] if blocks else base[lo:hi])
        if len(d) and (int(d.min()) < 0 or int(d.max()) > _U32):
            return None
        out[lo:hi] = d
    return out


def _narrowest(a: np.ndarray) -> np.ndarray:
    """An integer column in the narrowest signed type that holds its values, a itself when none
    is narrower."""
    if a.dtype.kind not in "iu" or not len(a):
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        if np.dtype(t).itemsize >= a.dtype.itemsize:
            break
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return a.astype(t)
    return a


def count(compute: Any) -> int:
    """How many kernels compute holds (narrow or wide)."""
    return len(compute["start_offset"] if "start_offset" in compute else compute["start"])


def _at(at: Any, n: int) -> np.ndarray | slice:
    """A position (a slice of step 1, or integer positions) as a slice or an index array."""
    if isinstance(at, slice):
        lo, hi, step = at.indices(n)
        assert step == 1
        return slice(lo, hi)
    at = np.asarray(at)
    assert at.dtype.kind in "iu"
    return at


class KernelStarts:
    """The compute kernels' starts as int64, by position (a slice, integer positions): their
    block's base plus their offset (narrow()), added where they are read."""

    def __init__(self, base: np.ndarray, offset: np.ndarray) -> None:
        self._base, self._offset = base, offset

    def __len__(self) -> int:
        return len(self._offset)

    def __getitem__(self, at: Any) -> np.ndarray:
        at = _at(at, len(self))
        rows = np.arange(at.start, at.stop) if isinstance(at, slice) else at
        return self._base[rows >> BLOCK_BITS] + self._offset[at]


def starts(compute: Mapping[str, Any] | Any) -> np.ndarray | KernelStarts:
    """The kernels' starts: their column as int64, or KernelStarts of the narrow form."""
    if "start_offset" in compute:
        return KernelStarts(compute["start_base"], compute["start_offset"])
    return np.asarray(compute["start"], dtype=np.int64)


class KernelEnds:
    """The compute kernels' ends as int64, by position (a slice, integer positions): their
    column end, or their start plus their duration (narrow()), added where they are read."""

    def __init__(self, compute: Mapping[str, Any] | Any, start: np.ndarray | KernelStarts) -> None:
        wide = "end" in compute
        self._end = np.asarray(compute["end"], dtype=np.int64) if wide else None
        self._duration = None if wide else np.asarray(compute["duration"])
        self._start = start

    def __len__(self) -> int:
        return len(self._start)

    def __getitem__(self, at: Any) -> np.ndarray:
        if self._end is not None:
            return self._end[at]
        assert self._duration is not None
        return self._start[at] + self._duration[at]
