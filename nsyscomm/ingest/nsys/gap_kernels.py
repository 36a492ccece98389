"""The compute kernels queued ahead of each collective on its device, by name.

A late arrival caused by ``gpu_compute`` (nsyscomm.analyses.late) is named by the kernels that
ran longer on the late rank than the same kernels on the other ranks. What a rank's device did
before a call is known inside one report: the compute kernels on the call's process and device
that started after the previous call on that device ended (its gpu_end) and ended no later than
this call's gpu_start. They are summed per kernel name, and the TOP names by time are kept per
call: a few rows per call, whatever the number of kernels (6M-kernel reports hold 200k calls).
Which ranks to compare is only known once the job is combined (sql/late_arrivals.sql).

Kernel time is summed per name, so kernels that overlap on several streams count each: the
per-name comparison is what matters, not the device's busy time (busy.py has that).
Kernels the previous call overlapped (concurrent compute during communication) are not in any
gap; a process's first call has no gap.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm.ingest.busy import ints, pair_keys
from nsyscomm.ingest.extract_type import TABLE

if TYPE_CHECKING:
    import duckdb

TOP = 5  # names kept per call
COLUMNS = TABLE["gap_kernels"].column_names
NAME_COLUMNS = TABLE["gap_kernel_names"].column_names


def _ints(col, missing: int = -1) -> np.ndarray:
    return pc.fill_null(col.cast(pa.int64()), missing).to_numpy()


def top_in_gaps(calls: pa.Table, compute: dict, threads: int = 1) -> pd.DataFrame:
    """Per call with a GPU start: the TOP compute-kernel names (ids, as the report's StringIds)
    by time in its gap, with their summed ns and kernel count. compute: numpy arrays pid, device,
    start, end, name (name -1 or NULL: unnamed, left out). threads: how many (pid, device) pairs
    are worked on at once."""
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in COLUMNS})
    if not calls.num_rows or compute is None or not len(compute["start"]) or "gpu_start" not in calls.column_names:
        return empty
    ok = pc.and_(pc.is_valid(calls["gpu_start"]), pc.is_valid(calls["gpu_end"])).to_numpy(zero_copy_only=False)
    if not ok.any():
        return empty
    cpid, cdev, cstart, cend = (_ints(calls[c])[ok] for c in ("pid", "device", "gpu_start", "gpu_end"))
    # the kernels' columns as they come (the C scan's are int32 but for the times): no copies
    kkey = pair_keys(ints(compute["pid"]), ints(compute["device"]))
    kstart = np.asarray(compute["start"], dtype=np.int64)
    kend = np.asarray(compute["end"], dtype=np.int64)
    kname = ints(compute["name"])

    parts = _by_pair(cpid, cdev, cstart, cend, kkey, kstart, kend, kname, threads)
    if not parts:
        return empty
    call, name_id, ns, count = (np.concatenate(a) for a in zip(*parts))
    del parts
    # the columns as they are, not copied into one block: this frame is the extract's largest
    return pd.DataFrame(
        {
            "pid": cpid[call],
            "device": cdev[call],
            "gpu_start": cstart[call],
            "name_id": name_id,
            "ns": ns,
            "count": count,
        },
        copy=False,
    )


def _by_pair(cpid, cdev, cstart, cend, kkey, kstart, kend, kname, threads: int) -> list[tuple]:
    """_top_of_pair() of each (pid, device) pair, in the pairs' order, `threads` pairs at a time
    (numpy and pandas let go of the GIL in their loops). kkey: the kernels' busy.pair_keys(). The
    temporaries are those pairs' kernels, not the report's (docs/performance.md measures the peak)."""
    ckey = pair_keys(cpid, cdev)
    keys, ccode = np.unique(ckey, return_inverse=True)
    named = kname >= 0

    def pair(c: int):
        ci = np.flatnonzero(ccode == c)
        ci = ci[np.argsort(cstart[ci], kind="stable")]
        ki = np.flatnonzero((kkey == keys[c]) & named)
        return _top_of_pair(ci, cstart[ci], cend[ci], kstart[ki], kend[ki], kname[ki]) if len(ki) else None

    if threads > 1 and len(keys) > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(keys)), thread_name_prefix="nsyscomm-gaps") as pool:
            return [p for p in pool.map(pair, range(len(keys))) if p is not None]
    return [p for p in map(pair, range(len(keys))) if p is not None]


def _top_of_pair(ci, cstart, cend, kstart, kend, kname):
    """The TOP names per call of one (pid, device) pair: calls ci sorted by start (cstart, cend),
    its named kernels. Returns (call index, name id, ns, count) arrays."""
    # the call each kernel is queued ahead of: the first call starting at or after the kernel's
    # end; kept when that call has a previous one that ended before the kernel began
    j = np.searchsorted(cstart, kend, side="left")
    use = (j > 0) & (j < len(cstart))
    use[use] &= kstart[use] >= cend[j[use] - 1]
    j, name, dur = j[use], kname[use], (kend - kstart)[use]
    if not len(j):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    # sum per (call, name): a hash of the pair's key, not a sort of every kernel
    width = int(name.max()) + 1
    pair, first = pd.factorize(j * width + name)
    ns = np.bincount(pair, weights=dur).astype(np.int64)
    count = np.bincount(pair).astype(np.int64)
    pj, pname = np.divmod(first, width)
    # the TOP names by time within each call: sorted by call, then longest first, in one sort of
    # one int64 key (call in the high bits, the time's complement below; a tie keeps the order
    # the pairs first appeared in, as the kernels came)
    jbits = max(1, int(pj.max()).bit_length())
    nsbits = 62 - jbits
    if nsbits >= 24:
        cap = (1 << nsbits) - 1
        order = np.argsort((pj << nsbits) | (cap - np.minimum(ns, cap)), kind="stable")
    else:  # more calls than fit beside the time: two keys
        order = np.lexsort((-ns, pj))
    pj, pname, ns, count = pj[order], pname[order], ns[order], count[order]
    starts = np.flatnonzero(np.r_[True, pj[1:] != pj[:-1]])
    rank = np.arange(len(pj)) - np.repeat(starts, np.diff(np.r_[starts, len(pj)]))
    keep = rank < TOP
    return ci[pj[keep]], pname[keep], ns[keep], count[keep]


def names_of(gaps: pd.DataFrame, con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The kernel names of gaps' name ids (name_id, name), from the attached report's StringIds
    (r), cut to the name bound (nsyscomm.ingest.limits). A few distinct names for up to millions
    of gap rows: the rows keep their ids, and names are joined only where a late arrival is
    described (sql/late_arrivals.sql)."""
    from nsyscomm.ingest import limits

    ids = pd.DataFrame({"id": np.unique(gaps["name_id"].to_numpy())})
    if ids.empty:
        return pd.DataFrame({"name_id": pd.Series(dtype="int64"), "name": pd.Series(dtype=object)})
    con.register("gap_kernel_ids", ids)
    try:
        names = dict(
            con.execute(
                f"SELECT s.id, {limits.cut_sql('s.value')} FROM r.StringIds s WHERE s.id IN (SELECT id FROM gap_kernel_ids)"
            ).fetchall()
        )
    finally:
        con.unregister("gap_kernel_ids")
    return pd.DataFrame(
        {
            "name_id": ids["id"],
            "name": pd.Series([names.get(int(i), f"kernel #{int(i)}") for i in ids["id"]], dtype=object),
        }
    )
