"""NCCL calls that launched no kernel in a report that has kernels (nsyscomm.ingest.nsys.nccl_payload's
units without one), and what they are (docs/architecture.md, "Facts about NCCL"):

- inside a call row (the wrapper's or PyTorch's range on the same thread): counted there. On a
  one-rank communicator NCCL has no peer to run a kernel with: it copies locally on its stream
  (the copy is the call's device time, nsyscomm.ingest.nsys.inside_calls) or, in place, does
  nothing on the device;
- held by no row, while its process launched device work after it: the call was made and
  launched nothing (a one-rank communicator without the wrapper): a row of its own, from NCCL's
  range;
- held by no row at the capture's end (no launch of its process after it): its kernels may lie
  past the end; not counted."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from nsyscomm import duck


def to_count(
    con: duckdb.DuckDBPyConnection,
    tables: dict,
    orphan: pd.DataFrame,
    calls: pd.DataFrame,
    warnings: list[str],
    report: str,
) -> pd.DataFrame:
    """The orphan units that become rows of their own; the warnings say what all of them are."""
    pid = np.array([(int(g) >> 24) & 0xFFFFFF for g in orphan["globalTid"]], np.int64)
    tid = np.array([int(g) & 0xFFFFFF for g in orphan["globalTid"]], np.int64)
    held, one_rank = _held(orphan, pid, tid, calls)
    free = ~held
    counted = np.zeros(len(orphan), bool)
    if free.any():
        last = _last_launch(con, tables)
        ends = orphan["end"].astype("int64").to_numpy()
        counted = free & np.array([e < last.get(int(p), -1) for p, e in zip(pid, ends)], bool)
    if one_rank.sum():
        warnings.append(
            f"{report}: {int(one_rank.sum())} NCCL call(s) on one-rank communicators launched no kernel "
            f"(NCCL copies locally on the device, or does nothing for an in-place call): counted, with "
            f"their copies' time as device time where they made copies, else their host time"
        )
    if int(held.sum() - one_rank.sum()):
        warnings.append(
            f"{report}: {int(held.sum() - one_rank.sum())} NCCL call(s) launched no kernel: counted by the "
            f"ranges that hold them, with their copies' time as device time where they made copies, else "
            f"their host time"
        )
    if counted.any():
        warnings.append(
            f"{report}: {int(counted.sum())} NCCL call(s) launched no kernel (a one-rank communicator, or "
            f"nothing to do on the device): counted from NCCL's own ranges, with their copies' time as device "
            f"time where they made copies, else their host time"
        )
    edge = free & ~counted
    if edge.any():
        warnings.append(
            f"{report}: {int(edge.sum())} NCCL call(s) at the capture's end launched no kernel inside the "
            f"report: not counted (their kernels may lie past the capture's end)"
        )
    return orphan[counted]


def rows(units: pd.DataFrame) -> pd.DataFrame:
    """Call rows of NCCL units (source nccl_payload, host times only)."""
    return pd.DataFrame(
        {
            "pid": [(int(g) >> 24) & 0xFFFFFF for g in units["globalTid"]],
            "tid": [int(g) & 0xFFFFFF for g in units["globalTid"]],
            "op": units["op"].to_numpy(),
            "api": units["api"].to_numpy(),
            "bytes": units["bytes"].to_numpy(),
            "group": units["group"].to_numpy(),
            "group_size": units["group_size"].to_numpy(),
            "seq": units["seq"].to_numpy() if "seq" in units else None,
            "cpu_start": units["start"].to_numpy(),
            "cpu_end": units["end"].to_numpy(),
            "source": "nccl_payload",
            "kernels": 0,
        }
    )


def _held(orphan: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per unit: whether a call row holds it (same thread, its host range around the unit), and
    whether that row's communicator has one rank."""
    held = np.zeros(len(orphan), bool)
    one_rank = np.zeros(len(orphan), bool)
    rows_ = calls[calls["cpu_start"].notna() & calls["cpu_end"].notna() & calls["tid"].notna()]
    if not len(rows_):
        return held, one_rank
    r = pd.DataFrame(
        {
            "pid": rows_["pid"].astype("int64").to_numpy(),
            "tid": rows_["tid"].astype("int64").to_numpy(),
            "cpu_start": rows_["cpu_start"].astype("int64").to_numpy(),
            "cpu_end": rows_["cpu_end"].astype("int64").to_numpy(),
            "gsize": pd.to_numeric(rows_["group_size"], errors="coerce").to_numpy(),
        }
    ).sort_values("cpu_start")
    u = pd.DataFrame(
        {
            "pid": pid,
            "tid": tid,
            "start": orphan["start"].astype("int64").to_numpy(),
            "end": orphan["end"].astype("int64").to_numpy(),
            "pos": np.arange(len(orphan)),
        }
    ).sort_values("start")
    m = pd.merge_asof(u, r, left_on="start", right_on="cpu_start", by=["pid", "tid"], direction="backward")
    ok = (m["cpu_end"] >= m["end"]).fillna(False).to_numpy(bool)
    held[m["pos"].to_numpy()] = ok
    one_rank[m["pos"].to_numpy()] = ok & (m["gsize"] == 1).to_numpy(bool)
    return held, one_rank


def _last_launch(con: duckdb.DuckDBPyConnection, tables: dict) -> dict[int, int]:
    """pid -> when the process last launched a kernel or copy that the report holds (the launch's
    runtime call, by correlation id in the same process; the report attached as r). A unit's own
    kernel may be in the report without its launch (the capture began after it): only launches
    seen after a unit show that the capture went on."""
    rt = set(tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", ()))
    if not {"start", "globalTid", "correlationId"} <= rt:
        return {}
    parts = [
        f'SELECT correlationId, globalPid >> 24 AS p FROM r."{t}"'
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")
        if {"globalPid", "correlationId"} <= set(tables.get(t, ()))
    ]
    if not parts:
        return {}
    try:
        got = con.execute(
            "SELECT (l.globalTid >> 24) & 16777215 AS pid, max(l.start) "
            f"FROM ({' UNION ALL '.join(parts)}) d JOIN r.CUPTI_ACTIVITY_KIND_RUNTIME l "
            "ON l.correlationId = d.correlationId AND (l.globalTid >> 24) = d.p GROUP BY ALL"
        ).fetchall()
    except duckdb.Error as e:  # a damaged table: every unit counts as at the capture's end
        if isinstance(e, duckdb.OutOfMemoryException) or duck.interrupted(e):
            raise
        return {}
    return {int(p): int(t) for p, t in got if p is not None and t is not None}
