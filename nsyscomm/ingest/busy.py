"""Compute busy time at the edges of each communication call, for exposed communication.

Exposed communication needs, for a stretch [s, e] of NCCL time on a device, how much of it
compute kernels on that device cover. Compute kernels merge into disjoint busy islands, so
that is B(e) - B(s), with B(t) the compute busy time before t. The edges of communication
stretches are always some call's gpu_start or gpu_end, so each source evaluates B there,
once per report, and ships two numbers per call (busy_at_start, busy_at_end) instead of the
millions of compute intervals: B is a difference of durations, unchanged by clock alignment.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _islands(start: np.ndarray, end: np.ndarray):
    """Sorted-by-start intervals -> island starts, ends and busy time before each island."""
    run_end = np.maximum.accumulate(end)
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = start[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    i_start = start[first]
    i_end = np.maximum.reduceat(end, first)
    length = i_end - i_start
    before = np.concatenate(([0], np.cumsum(length)[:-1]))
    return i_start, i_end, before


def _busy_at(t: np.ndarray, i_start, i_end, before) -> np.ndarray:
    j = np.searchsorted(i_start, t, side="right") - 1
    out = np.zeros(len(t), dtype=np.int64)
    ok = j >= 0
    jj = j[ok]
    out[ok] = before[jj] + np.minimum(t[ok], i_end[jj]) - i_start[jj]
    return out


def busy_before(calls: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """Add busy_at_start / busy_at_end (ns of compute busy time on the call's process and device
    before its gpu_start / gpu_end) to calls. compute: pid, device, start, end of compute kernels."""
    calls = calls.copy()
    calls["busy_at_start"] = pd.array([pd.NA] * len(calls), dtype="Int64")
    calls["busy_at_end"] = pd.array([pd.NA] * len(calls), dtype="Int64")
    if not len(calls) or "gpu_start" not in calls:
        return calls
    gpu = calls["gpu_start"].notna() & calls["gpu_end"].notna()
    if not gpu.any():
        return calls
    calls.loc[gpu, ["busy_at_start", "busy_at_end"]] = 0
    if compute is None or not len(compute):
        return calls
    comp = compute.dropna(subset=["start", "end"])
    cdev = comp["device"].fillna(-1).astype("int64").to_numpy()
    cpid = comp["pid"].astype("int64").to_numpy()
    g = calls.loc[gpu]
    gdev = g["device"].astype("Int64").fillna(-1).astype("int64").to_numpy()
    gpid = g["pid"].astype("int64").to_numpy()
    gs = g["gpu_start"].astype("int64").to_numpy()
    ge = g["gpu_end"].astype("int64").to_numpy()
    bs = np.zeros(len(g), dtype=np.int64)
    be = np.zeros(len(g), dtype=np.int64)
    cstart = comp["start"].astype("int64").to_numpy()
    cend = comp["end"].astype("int64").to_numpy()
    for pid, dev in set(zip(gpid.tolist(), gdev.tolist())):
        sel = (cpid == pid) & (cdev == dev)
        if not sel.any():
            continue
        order = np.argsort(cstart[sel], kind="stable")
        isl = _islands(cstart[sel][order], cend[sel][order])
        rows = (gpid == pid) & (gdev == dev)
        bs[rows] = _busy_at(gs[rows], *isl)
        be[rows] = _busy_at(ge[rows], *isl)
    calls.loc[gpu, "busy_at_start"] = bs
    calls.loc[gpu, "busy_at_end"] = be
    return calls
