"""The compute kernels queued ahead of each collective on its device, by name (issue 21).

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

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

TOP = 5  # names kept per call
COLUMNS = ["pid", "device", "gpu_start", "name_id", "ns", "count"]


def _ints(col, missing: int = -1) -> np.ndarray:
    return pc.fill_null(col.cast(pa.int64()), missing).to_numpy()


def top_in_gaps(calls: pa.Table, compute: dict) -> pd.DataFrame:
    """Per call with a GPU start: the TOP compute-kernel names (ids, as the report's StringIds)
    by time in its gap, with their summed ns and kernel count. compute: numpy arrays pid, device,
    start, end, name (name -1 or NULL: unnamed, left out)."""
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in COLUMNS})
    if not calls.num_rows or compute is None or not len(compute["start"]) or "gpu_start" not in calls.column_names:
        return empty
    ok = pc.and_(pc.is_valid(calls["gpu_start"]), pc.is_valid(calls["gpu_end"])).to_numpy(zero_copy_only=False)
    if not ok.any():
        return empty
    cpid, cdev, cstart, cend = (_ints(calls[c])[ok] for c in ("pid", "device", "gpu_start", "gpu_end"))
    kpid = np.asarray(compute["pid"], dtype=np.int64)
    kdev = np.nan_to_num(np.asarray(compute["device"], dtype=np.float64), nan=-1).astype(np.int64)
    kstart = np.asarray(compute["start"], dtype=np.int64)
    kend = np.asarray(compute["end"], dtype=np.int64)
    kname = np.nan_to_num(np.asarray(compute["name"], dtype=np.float64), nan=-1).astype(np.int64)

    # (pid, device) numbered from the calls' pairs; a kernel on a device without calls has none
    ckey = cpid * (1 << 32) + (cdev + 1)
    keys, ccode = np.unique(ckey, return_inverse=True)
    kkey = kpid * (1 << 32) + (kdev + 1)
    pos = np.minimum(np.searchsorted(keys, kkey), len(keys) - 1)
    kcode = np.where(keys[pos] == kkey, pos, -1)
    # one sorted timeline for all pairs: each pair's times shifted past the previous pair's
    t0 = min(int(cstart.min()), int(kstart.min()))
    span = max(int(cend.max()), int(kend.max())) - t0 + 1
    call_t = (cstart - t0) + ccode * span
    order = np.argsort(call_t, kind="stable")
    call_t, ccode_s, cend_s = call_t[order], ccode[order], cend[order]
    # the call each kernel is queued ahead of: the first call of its pair starting at or after the
    # kernel's end; kept when that call has a previous one on the pair that ended before the kernel began
    use = (kcode >= 0) & (kname >= 0)
    j = np.searchsorted(call_t, (kend - t0) + kcode * span, side="left")
    use &= (j < len(call_t)) & (j > 0)
    jj = np.where(use, j, 1)
    use &= (ccode_s[np.minimum(jj, len(call_t) - 1)] == kcode) & (ccode_s[jj - 1] == kcode)
    use &= kstart >= cend_s[jj - 1]
    if not use.any():
        return empty
    j, name, dur = j[use], kname[use], (kend - kstart)[use]
    df = pd.DataFrame({"j": j, "name_id": name, "ns": dur})
    g = df.groupby(["j", "name_id"], sort=False).agg(ns=("ns", "sum"), count=("ns", "size")).reset_index()
    g = g.sort_values(["j", "ns"], ascending=[True, False], kind="stable")
    g = g[g.groupby("j", sort=False).cumcount() < TOP]
    call = order[g["j"].to_numpy()]
    return pd.DataFrame(
        {
            "pid": cpid[call],
            "device": cdev[call],
            "gpu_start": cstart[call],
            "name_id": g["name_id"].to_numpy(),
            "ns": g["ns"].to_numpy(),
            "count": g["count"].to_numpy(),
        }
    )


def with_names(gaps: pd.DataFrame, con) -> pd.DataFrame:
    """gaps with name_id replaced by the kernel's name from the attached report's StringIds (r),
    cut to the name bound (nsyscomm.ingest.limits)."""
    from nsyscomm.ingest import limits

    out = gaps.drop(columns=["name_id"]).assign(name=pd.Series(dtype=object))
    if gaps.empty:
        return out[["pid", "device", "gpu_start", "name", "ns", "count"]]
    ids = pd.DataFrame({"id": np.unique(gaps["name_id"].to_numpy())})
    con.register("gap_kernel_ids", ids)
    try:
        names = dict(
            con.execute(
                f"SELECT s.id, {limits.cut_sql('s.value')} FROM r.StringIds s WHERE s.id IN (SELECT id FROM gap_kernel_ids)"
            ).fetchall()
        )
    finally:
        con.unregister("gap_kernel_ids")
    out["name"] = [names.get(int(i), f"kernel #{int(i)}") for i in gaps["name_id"]]
    return out[["pid", "device", "gpu_start", "name", "ns", "count"]]
