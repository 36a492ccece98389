"""Compute busy time at the edges of each communication call, for exposed communication.

Exposed communication needs, for a stretch [s, e] of NCCL time on a device, how much of it
compute kernels on that device cover. Compute kernels merge into disjoint busy islands, so
that is B(e) - B(s), with B(t) the compute busy time before t. The edges of communication
stretches are always some call's gpu_start or gpu_end, so each source evaluates B there,
once per report, and ships two numbers per call (busy_at_start, busy_at_end) instead of the
millions of compute intervals: B is a difference of durations, unchanged by clock alignment.

The islands are made in numpy when the compute kernels fit in memory (nsyscomm.ingest.nsys.reader.fits_in_memory),
else in DuckDB (sql/compute_islands.sql, sql/busy_at_edges.sql), which spills past its memory
limit: a report larger than RAM never has its kernels held whole.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import ArrayLike

from nsyscomm.ingest import compute_columns

if TYPE_CHECKING:
    import duckdb


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


def islands(
    compute: pd.DataFrame | Mapping[str, np.ndarray] | None,
) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(pid, device) -> compute busy islands (starts, ends, busy time before each). compute: pid,
    device, start, end of the compute kernels (a DataFrame or a dict of numpy arrays, integers
    of any width; a NULL device NaN or -1; or the narrow form of
    nsyscomm.ingest.compute_columns.narrow, the times as offsets), in any order.
    Independent of the calls, so a source can build it while it reads its calls."""
    made = islands_by_process(compute)
    if not isinstance(made, IslandsByProcess):
        return made
    out = {}
    for p in made.pids:
        out.update(made.of(int(p)))
    return out


def islands_by_process(
    compute: pd.DataFrame | Mapping[str, np.ndarray] | None,
) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] | IslandsByProcess:
    """islands() for busy_at_edges(), made a process at a time as it asks for them
    (IslandsByProcess): one process's islands held at once, not the report's (24 bytes an
    island, as many as the kernels where they leave the device idle between them). Past
    PAIRS_ONE_AT_A_TIME processes, every pair's at once (one sort of all the kernels)."""
    if compute is None or not compute_columns.count(compute):
        return {}
    by_process = IslandsByProcess(compute)
    if len(by_process.pids) > PAIRS_ONE_AT_A_TIME:
        return _islands_sorted(by_process.pid, by_process.device, by_process.start[:], by_process.end[:])
    return by_process


class IslandsByProcess:
    """(pid, device) -> islands() of that pair, made for the whole process when one of its pairs
    is first asked for and let go of when another process's is: busy_at_edges() asks for the
    pairs in order of process. The kernels' columns are held as they come (no copies)."""

    def __init__(self, compute: pd.DataFrame | Mapping[str, np.ndarray]) -> None:
        self.pid, self.device = ints(compute["pid"]), ints(compute["device"])
        self.start = compute_columns.starts(compute)
        self.end = compute_columns.KernelEnds(compute, self.start)
        # the narrow form's durations: the ends made from the starts already read back, not from
        # the starts read back a second time (KernelEnds)
        self.duration = None if "end" in compute else np.asarray(compute["duration"])
        self._pid: int | None = None
        self._pairs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    @functools.cached_property
    def pids(self) -> np.ndarray:
        """The processes with compute kernels, sorted (one pass over every kernel)."""
        return _distinct(self.pid)

    def __bool__(self) -> bool:
        return bool(len(self.start))

    def __contains__(self, pair: tuple[int, int]) -> bool:
        return pair in self.of(pair[0])

    def __getitem__(self, pair: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.of(pair[0])[pair]

    def of(self, p: int) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The islands of process p's pairs, the process's kernels a slice of the report at a time
        when they come in start order (nsys exports them so): the temporaries are a slice's, not
        the report's. Otherwise that process's kernels sorted, a tie kept in the report's order,
        as one sort of all the kernels by (pid, device, start) would give them."""
        if p != self._pid:
            self._pairs = {}  # the last process's, let go of before this one's are made
            try:
                self._pairs = _islands_in_slices(p, self.pid, self.device, self.times)
            except _OutOfOrder:
                self._pairs = _islands_of_process(p, self.pid, self.device, self.times)
            self._pid = p
        return self._pairs

    def times(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends (int64) of the kernels at these positions."""
        start = self.start[at]
        return start, (start + self.duration[at] if self.duration is not None else self.end[at])


SLICE = 1 << 18  # kernels of the report looked at a time


class _OutOfOrder(Exception):
    """A process's kernels on a device do not come in start order."""


def _distinct(a: np.ndarray) -> np.ndarray:
    """a's distinct values, sorted, found a slice at a time (a sort of the new ones only)."""
    known = np.unique(a[:SLICE])
    for lo in range(SLICE, len(a), SLICE):
        part = a[lo : lo + SLICE]
        at = np.minimum(np.searchsorted(known, part), len(known) - 1)
        new = part[known[at] != part]
        if len(new):
            known = np.union1d(known, new)
    return known


def _islands_in_slices(p: int, cpid, cdev, times) -> dict:
    """islands() of process p, its kernels a slice of the report at a time (_OutOfOrder when they
    do not come in start order); times(positions) gives the kernels' starts and ends."""
    merges: dict[int, _Merge] = {}
    for lo in range(0, len(cpid), SLICE):
        at = np.flatnonzero(cpid[lo : lo + SLICE] == p)
        if not len(at):
            continue
        at += lo
        devs = cdev[at]
        if (devs == devs[0]).all():
            merges.setdefault(int(devs[0]), _Merge()).add(*times(at))
            continue
        for d in np.unique(devs):
            merges.setdefault(int(d), _Merge()).add(*times(at[devs == d]))
    return {(p, d): merges[d].islands() for d in sorted(merges)}


def _islands_of_process(p: int, cpid, cdev, times) -> dict:
    """islands() of process p, its kernels sorted by (device, start) at once; times(positions)
    gives the kernels' starts and ends."""
    out = {}
    of_pid = np.flatnonzero(cpid == p)
    devs = cdev[of_pid]
    for d in np.unique(devs):
        start, end = times(of_pid[devs == d])
        order = np.argsort(start, kind="stable")
        out[p, int(d)] = _islands(start[order], end[order])
    return out


class _Merge:
    """_islands() of kernels that come in start order, a part at a time: the islands before the
    last are closed (every later kernel starts after their run ended), the last one may grow."""

    def __init__(self) -> None:
        self.closed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.last: tuple[int, int, int] | None = None  # its start, end and the busy time before it
        self.last_start: int | None = None  # the start of the last kernel added

    def add(self, start: np.ndarray, end: np.ndarray) -> None:
        if (self.last_start is not None and start[0] < self.last_start) or (start[1:] < start[:-1]).any():
            raise _OutOfOrder
        self.last_start = int(start[-1])
        base = 0
        if self.last is not None:
            # the last island first, as one kernel of its start and end: every kernel before it
            # ended before it began, so before the kernels added now too
            i_start, i_end, base = self.last
            start, end = np.r_[i_start, start], np.r_[i_end, end]
        i_starts, i_ends, before = _islands(start, end)
        before += base
        self.closed.append((i_starts[:-1], i_ends[:-1], before[:-1]))
        self.last = (int(i_starts[-1]), int(i_ends[-1]), int(before[-1]))

    def islands(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert self.last is not None
        i_start, i_end, before = (
            np.concatenate([part[k] for part in self.closed] + [np.array([last], dtype=np.int64)])
            for k, last in enumerate(self.last)
        )
        return i_start, i_end, before


# More processes than this in one report: one sort of all the kernels instead of a pass over
# them per process
PAIRS_ONE_AT_A_TIME = 64


def ints(a: ArrayLike) -> np.ndarray:
    """An integer column as it is (any width, no copy), or a float one (NULL as NaN) as int64
    with -1 for NULL."""
    arr = np.asarray(a)
    if arr.dtype.kind in "iu":
        return arr
    return np.nan_to_num(np.asarray(a, dtype=np.float64), nan=-1).astype(np.int64)


def _islands_sorted(cpid: np.ndarray, cdev: np.ndarray, cstart: np.ndarray, cend: np.ndarray) -> dict:
    """islands() for many (pid, device) pairs: the kernels sorted once by (pid, device, start)."""
    order = np.lexsort((cstart, cdev, cpid))
    cpid, cdev, cstart, cend = cpid[order], cdev[order], cstart[order], cend[order]
    del order
    change = np.flatnonzero((np.diff(cpid) != 0) | (np.diff(cdev) != 0)) + 1
    bounds = np.concatenate(([0], change, [len(cpid)]))
    return {
        (int(cpid[lo]), int(cdev[lo])): _islands(cstart[lo:hi], cend[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])
    }


def busy_before(calls: pa.Table, compute: pd.DataFrame | Mapping[str, np.ndarray] | None) -> pa.Table:
    """Add busy_at_start / busy_at_end (ns of compute busy time on the call's process and device
    before its gpu_start / gpu_end) to calls (an Arrow table). compute: the compute kernels (see
    islands())."""
    return busy_at_edges(calls, islands(compute))


def busy_at_edges(calls: pa.Table, by_device: dict | IslandsByProcess) -> pa.Table:
    """busy_before() with the islands made (islands()) or made as asked for (islands_by_process())."""

    def busy(pid, dev, start, end):
        bs, be = np.zeros(len(pid), dtype=np.int64), np.zeros(len(pid), dtype=np.int64)
        if not by_device:
            return bs, be
        # the calls grouped by (pid, device) with one sort, not one mask per group (a pass over
        # every call per group); in order of process, as islands_by_process() makes them
        order = np.lexsort((dev, pid))
        p, d = pid[order], dev[order]
        bounds = np.flatnonzero(np.r_[True, (p[1:] != p[:-1]) | (d[1:] != d[:-1]), True])
        del p, d
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            rows = order[lo:hi]
            key = (int(pid[rows[0]]), int(dev[rows[0]]))
            if key in by_device:
                bs[rows] = _busy_at(start[rows], *by_device[key])
                be[rows] = _busy_at(end[rows], *by_device[key])
        return bs, be

    return _with_busy(calls, busy)


def islands_in_duckdb(con: duckdb.DuckDBPyConnection) -> None:
    """The compute busy islands as table compute_islands of con (from its src_kernels and
    nccl_kernel_names, sql/compute_kernels.sql): the route for kernels that do not fit in memory."""
    from nsyscomm import duck

    con.execute(
        f"CREATE TABLE compute_islands AS WITH compute_kernels AS ({duck.sql('compute_kernels')}) "
        f"SELECT * FROM ({duck.sql('compute_islands')})"
    )


def busy_at_edges_in_duckdb(calls: pa.Table, con: duckdb.DuckDBPyConnection) -> pa.Table:
    """busy_at_edges() over the islands of islands_in_duckdb()."""
    from nsyscomm import duck

    def busy(pid, dev, start, end):
        edges = pa.table({"i": np.arange(len(pid)), "pid": pid, "device": dev, "gpu_start": start, "gpu_end": end})
        # a table, not the Arrow one registered: DuckDB estimates that at ~1 row and joins it by
        # a nested loop (ASOF joins under asof_loop_join_threshold), quadratic in the calls
        con.from_arrow(edges).create("call_edges")
        try:
            out = con.execute(duck.sql("busy_at_edges")).fetchnumpy()  # ordered by i
        finally:
            con.execute("DROP TABLE call_edges")
        return out["busy_at_start"], out["busy_at_end"]

    return _with_busy(calls, busy)


def arrow_ints(col: pa.ChunkedArray, missing: int = -1) -> np.ndarray:
    """An Arrow integer column as int64 numpy, NULL as ``missing``: its own buffer when it is
    one of int64 without NULLs (read-only), else a copy."""
    if col.null_count == 0 and col.type == pa.int64() and col.num_chunks == 1:
        return col.chunk(0).to_numpy()
    return pc.fill_null(col.cast(pa.int64()), missing).to_numpy()


def _with_busy(calls, busy):
    """calls (Arrow) with busy_at_start / busy_at_end from busy(pid, device, gpu_start, gpu_end)
    -> the two as arrays, called for the calls with both GPU edges; NULL for the others. In
    Arrow, not pandas: pandas' nullable integers made the same step cost more than the rest."""
    n = calls.num_rows
    gpu = np.zeros(n, dtype=bool)
    if n and "gpu_start" in calls.column_names and "gpu_end" in calls.column_names:
        gpu = pc.and_(pc.is_valid(calls["gpu_start"]), pc.is_valid(calls["gpu_end"])).to_numpy(zero_copy_only=False)
    if gpu.all() and n:  # busy()'s arrays are the columns: no copy of them into others
        bs, be = busy(*(arrow_ints(calls[c]) for c in ("pid", "device", "gpu_start", "gpu_end")))
    else:
        bs = np.zeros(n, dtype=np.int64)
        be = np.zeros(n, dtype=np.int64)
        if gpu.any():
            # a call of unknown process or device (its kernel's process and launch both missing) has no islands
            cols = [arrow_ints(calls[c])[gpu] for c in ("pid", "device", "gpu_start", "gpu_end")]
            bs[gpu], be[gpu] = busy(*cols)
    mask = ~gpu
    for name, values in (("busy_at_start", bs), ("busy_at_end", be)):
        col = pa.array(values, pa.int64(), mask=mask if mask.any() else None)
        if name in calls.column_names:
            calls = calls.set_column(calls.column_names.index(name), name, col)
        else:
            calls = calls.append_column(name, col)
    return calls
