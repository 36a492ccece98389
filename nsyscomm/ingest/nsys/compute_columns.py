"""The compute kernels' columns as the C scan reads them (nsyscomm.ingest.nsys.reader), made
narrower for the time they are held.

They are held from the scan until the busy islands and the kernels in each call's gap are
made, after the calls (nsyscomm.ingest.busy, nsyscomm.ingest.nsys.gap_kernels): across the
extraction's peak, while the calls are made. Their readers take a column of any integer width
and the end either as it is or as a duration (busy.KernelEnds).
"""

from __future__ import annotations

import numpy as np

SLICE = 1 << 18  # kernels made narrower at a time: what the temporaries scale with


def narrow(compute: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The compute kernels' columns (pid, device, start, end, name) as narrow as their values
    allow, exactly: pid, device and name in the narrowest of int8, int16 and int32 that holds
    them, and the end as the kernel's duration (column duration, uint32: up to 4.29 s) when every
    kernel's fits, else as it is; the start as it is. About 7 bytes a kernel fewer than the C
    scan's widths. compute is emptied as its columns are made narrower, so that each wide one is
    let go of then (the C scan's buffers are held by their arrays alone); the durations are
    made a slice at a time."""
    out = {}
    for n in [n for n in compute if n not in ("start", "end")]:
        out[n] = _narrowest(compute.pop(n))
    start, end = compute.pop("start"), compute.pop("end")
    out["start"] = start
    duration = np.empty(len(start), dtype=np.uint32)
    for lo in range(0, len(start), SLICE):
        d = end[lo : lo + SLICE] - start[lo : lo + SLICE]
        if len(d) and (int(d.min()) < 0 or int(d.max()) > np.iinfo(np.uint32).max):
            out["end"] = end
            return out
        duration[lo : lo + SLICE] = d
    out["duration"] = duration
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
