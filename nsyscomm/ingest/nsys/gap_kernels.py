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

Memory: the kernels are read a slice at a time (SLICE of the report's kernels, of which a pair
(process, device) takes its own), and the calls whose gaps a slice completes are written out
then, each call's rows once, into arrays sized by the calls. That holds when each pair's gap
kernels come in the order of their calls, as they do when the kernels are in start order (nsys
exports them so). A pair whose kernels come otherwise is worked on whole instead, with the same
result.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm.ingest import compute_columns
from nsyscomm.ingest.busy import arrow_ints, ints
from nsyscomm.ingest.extract_type import TABLE

if TYPE_CHECKING:
    import duckdb

TOP = 5  # names kept per call
SLICE = 1 << 18  # kernels of the report looked at a time: what this step's temporaries scale with
COLUMNS = TABLE["gap_kernels"].column_names
NAME_COLUMNS = TABLE["gap_kernel_names"].column_names
# the columns as narrow as their values are (combine casts them to the declared types): processes
# are 24 bits (sql/compute_kernels.sql), name ids int32 as the C scan keeps them, counts are of
# kernels; the times stay int64
DTYPES = {
    "pid": np.int32,
    "device": np.int32,
    "gpu_start": np.int64,
    "name_id": np.int32,
    "ns": np.int64,
    "count": np.int32,
}


def top_in_gaps(calls: pa.Table, compute: dict, threads: int = 1, slice_kernels: int = SLICE) -> pd.DataFrame:
    """Per call with a GPU start: the TOP compute-kernel names (ids, as the report's StringIds)
    by time in its gap, with their summed ns and kernel count, by (pid, device), then the call's
    start, then time. compute: numpy arrays pid, device, start, end, name (name -1 or NULL:
    unnamed, left out), or their narrow form (nsyscomm.ingest.compute_columns.narrow). threads: how many (pid, device) pairs are worked on at once;
    slice_kernels: how many of the report's kernels are looked at a time."""
    if (
        not calls.num_rows
        or compute is None
        or not compute_columns.count(compute)
        or "gpu_start" not in calls.column_names
    ):
        return _empty()
    ok = pc.and_(pc.is_valid(calls["gpu_start"]), pc.is_valid(calls["gpu_end"])).to_numpy(zero_copy_only=False)
    if not ok.any():
        return _empty()
    keep = slice(None) if ok.all() else ok  # the columns as they are when every call has both
    cpid, cdev, cstart, cend = (arrow_ints(calls[c])[keep] for c in ("pid", "device", "gpu_start", "gpu_end"))
    # the calls by (pid, device), then start (a tie kept in the calls' order)
    order = np.lexsort((cstart, cdev, cpid))
    cpid, cdev, cstart, cend = cpid[order], cdev[order], cstart[order], cend[order]
    del order
    bounds = np.flatnonzero(np.r_[True, (cpid[1:] != cpid[:-1]) | (cdev[1:] != cdev[:-1]), True])
    pids, devs = cpid[bounds[:-1]], cdev[bounds[:-1]]  # each pair's
    del cpid, cdev
    # the kernels' columns as they come (the C scan's are int32 but for the times): no copies
    kernels = _Kernels(compute, max(1, slice_kernels))
    rows = _Rows(TOP * len(cstart), kernels.name_dtype())

    def pair(i: int) -> int:
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        pid, dev = int(pids[i]), int(devs[i])
        at = TOP * lo
        try:
            end = _top_of_pair(cstart[lo:hi], cend[lo:hi], kernels.in_slices(pid, dev), rows, at)
        except _OutOfOrder:
            end = _top_of_pair(cstart[lo:hi], cend[lo:hi], [kernels.all_of(pid, dev)], rows, at)
        rows.pid[at:end] = pid
        rows.device[at:end] = dev
        return end

    pairs = range(len(bounds) - 1)
    if threads > 1 and len(pairs) > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(pairs)), thread_name_prefix="nsyscomm-gaps") as pool:
            ends = list(pool.map(pair, pairs))
    else:
        ends = [pair(i) for i in pairs]
    return rows.frame([(TOP * int(bounds[i]), end) for i, end in zip(pairs, ends)])


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=DTYPES[c]) for c in COLUMNS})


class _OutOfOrder(Exception):
    """A pair's gap kernels came back to a call whose rows were written."""


class _Kernels:
    """The report's compute kernels, a pair's named ones at a time."""

    def __init__(self, compute: dict, slice_kernels: int) -> None:
        self.pid, self.device, self.name = ints(compute["pid"]), ints(compute["device"]), ints(compute["name"])
        self.start = compute_columns.starts(compute)
        self.end = compute_columns.KernelEnds(compute, self.start)
        # the narrow form's durations: the ends made from the starts already read back, not from
        # the starts read back a second time (KernelEnds)
        self.duration = None if "end" in compute else np.asarray(compute["duration"])
        # where every kernel is named, the names are not looked at again for each pair
        self.all_named = not len(self.name) or int(self.name.min()) >= 0
        self.slice = slice_kernels

    def name_dtype(self) -> type:
        """int32 for the name ids, unless some do not fit."""
        fits = self.name.dtype in (np.int8, np.int16, np.int32) or not len(self.name) or int(self.name.max()) < 1 << 31
        return np.int32 if fits else np.int64

    def _of(self, pid: int, dev: int, lo: int, hi: int) -> np.ndarray:
        """Where the pair's named kernels are among kernels lo to hi (positions from lo)."""
        m = self.pid[lo:hi] == pid
        m &= self.device[lo:hi] == dev
        if not self.all_named:
            m &= self.name[lo:hi] >= 0
        return np.flatnonzero(m)

    def in_slices(self, pid: int, dev: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The pair's named kernels (start, end, name), in the report's order, a slice of the
        report at a time."""
        for lo in range(0, len(self.start), self.slice):
            hi = lo + self.slice
            at = self._of(pid, dev, lo, hi)
            if len(at):
                yield (*self._times(lo + at), self.name[lo:hi][at])

    def all_of(self, pid: int, dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pair's named kernels at once."""
        at = self._of(pid, dev, 0, len(self.start))
        return (*self._times(at), self.name[at])

    def _times(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends (int64) of the kernels at these positions."""
        start = self.start[at]
        return start, (start + self.duration[at] if self.duration is not None else self.end[at])


def _top_of_pair(cstart, cend, kernels: Iterable[tuple], rows: _Rows, at: int) -> int:
    """The TOP names per call of one (pid, device) pair, written into rows from ``at``: its calls
    sorted by start (cstart, cend), its named kernels (start, end, name) in the report's order,
    in parts. Returns where its rows end. Raises _OutOfOrder when a part has a kernel in the gap
    of a call an earlier part had gone past."""
    last = None  # the sums per name of the last call a part reached: later parts may add to them
    done = 0  # the calls before this one have all their rows written
    for kstart, kend, kname in kernels:
        # the call each kernel is queued ahead of: the first call starting at or after the
        # kernel's end; kept when that call has a previous one that ended before the kernel began
        j = np.searchsorted(cstart, kend, side="left")
        use = (j > 0) & (j < len(cstart))
        use[use] &= kstart[use] >= cend[j[use] - 1]
        if not use.any():
            continue
        j, name, dur = j[use], kname[use], kend[use] - kstart[use]
        if int(j.min()) < done:
            raise _OutOfOrder
        sums = _sums(last, j, name, dur)
        done = int(sums[0].max())
        reached = sums[0] == done
        at = rows.write_top(cstart, [a[~reached] for a in sums], at)
        last = [a[reached] for a in sums]
    if last is not None:
        at = rows.write_top(cstart, last, at)
    return at


def _sums(last: list[np.ndarray] | None, j: np.ndarray, name: np.ndarray, dur: np.ndarray) -> list[np.ndarray]:
    """Kernels (the call of their gap j, name, duration) summed per (call, name), after the sums
    ``last`` (call, name, ns, count) of the kernels before them: the calls, names, ns and counts,
    in the order each (call, name) first came."""
    count = None
    if last is not None and len(last[0]):
        count = np.concatenate((last[3], np.ones(len(j), dtype=np.int64)))
        j, name, dur = (np.concatenate((a, b)) for a, b in zip(last[:3], (j, name, dur)))
    # a hash of the (call, name) key, not a sort of every kernel
    base, width = int(j.min()), int(name.max()) + 1
    pair, first = pd.factorize((j - base) * width + name)
    ns = np.bincount(pair, weights=dur).astype(np.int64)
    counts = np.bincount(pair, weights=count).astype(np.int64) if count is not None else np.bincount(pair)
    pj, pname = np.divmod(first, width)
    return [pj + base, pname, ns, counts]


class _Rows:
    """The result's columns, of room for every call's TOP rows: each pair writes from TOP times
    its first call's position, and frame() closes the holes."""

    def __init__(self, capacity: int, name_dtype: type) -> None:
        self.cols: dict[str, np.ndarray] = {
            c: np.empty(capacity, dtype=name_dtype if c == "name_id" else DTYPES[c]) for c in COLUMNS
        }
        self.pid, self.device = self.cols["pid"], self.cols["device"]

    def write_top(self, cstart: np.ndarray, sums: list[np.ndarray], at: int) -> int:
        """The TOP names by time of each call of ``sums`` (every name of those calls, in the
        order they first came), written from ``at``, by call then longest first, a tie in the
        order the names first came. Returns where they end."""
        pj, pname, ns, count = sums
        if not len(pj):
            return at
        # one sort of one int64 key: the call in the high bits, the time's complement below
        rel = pj - pj.min()
        jbits = max(1, int(rel.max()).bit_length())
        nsbits = 62 - jbits
        if nsbits >= 24:
            cap = (1 << nsbits) - 1
            order = np.argsort((rel << nsbits) | (cap - np.clip(ns, 0, cap)), kind="stable")
        else:  # more calls than fit beside the time: two keys
            order = np.lexsort((-ns, pj))
        pj = pj[order]
        starts = np.flatnonzero(np.r_[True, pj[1:] != pj[:-1]])
        rank = np.arange(len(pj)) - np.repeat(starts, np.diff(np.r_[starts, len(pj)]))
        keep = order[rank < TOP]
        end = at + len(keep)
        self.cols["gpu_start"][at:end] = cstart[pj[rank < TOP]]
        self.cols["name_id"][at:end] = pname[keep]
        self.cols["ns"][at:end] = ns[keep]
        self.cols["count"][at:end] = count[keep]
        return end

    def frame(self, parts: list[tuple[int, int]]) -> pd.DataFrame:
        """The rows of parts (where each pair's rows begin and end, in order), moved together in
        place, as the frame."""
        n = 0
        for lo, hi in parts:
            if lo != n:
                for a in self.cols.values():
                    for s in range(lo, hi, SLICE):  # in slices: a move onto itself copies the slice
                        e = min(s + SLICE, hi)
                        a[n + s - lo : n + e - lo] = a[s:e]
            n += hi - lo
        for a in self.cols.values():
            a.resize(n, refcheck=False)  # gives the room left back
        # the columns as they are, not copied into one block: this frame is the extract's largest
        return pd.DataFrame(self.cols, copy=False)


def names_of(gaps: pd.DataFrame, con: duckdb.DuckDBPyConnection, known: dict[int, str] | None = None) -> pd.DataFrame:
    """The kernel names of gaps' name ids (name_id, name), from the attached report's StringIds
    (r), cut to the name bound (nsyscomm.ingest.limits): those of ``known`` (names_of_ids(), read
    ahead) where given. A few distinct names for up to millions of gap rows: the rows keep their
    ids, and names are joined only where a late arrival is described (sql/late_arrivals.sql)."""
    ids = pd.DataFrame({"id": np.unique(gaps["name_id"].to_numpy()).astype(np.int64)})
    if ids.empty:
        return pd.DataFrame({"name_id": pd.Series(dtype="int64"), "name": pd.Series(dtype=object)})
    names = known if known is not None else names_of_ids(ids["id"].to_numpy(), con)
    return pd.DataFrame(
        {
            "name_id": ids["id"],
            "name": pd.Series([names.get(int(i), f"kernel #{int(i)}") for i in ids["id"]], dtype=object),
        }
    )


def compute_names(compute: dict, con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """names_of_ids() of every compute kernel's name id: those of any call's gap among them, read
    before the gaps are known (nsyscomm.ingest.nsys.extract reads them while the calls are made)."""
    return names_of_ids(np.unique(ints(compute["name"])).astype(np.int64), con)


def names_of_ids(ids: np.ndarray, con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """id -> the string of that id in the attached report's StringIds (r), cut to the name bound
    (nsyscomm.ingest.limits); an id it lacks is left out."""
    from nsyscomm.ingest import limits

    con.register("gap_kernel_ids", pd.DataFrame({"id": ids}))
    try:
        return dict(
            con.execute(
                f"SELECT s.id, {limits.cut_sql('s.value')} FROM r.StringIds s WHERE s.id IN (SELECT id FROM gap_kernel_ids)"
            ).fetchall()
        )
    finally:
        con.unregister("gap_kernel_ids")
