"""Exposed communication: each call's part of it (sql/overlap.sql sums the parts per rank, and
per rank and step: Result.overlap, the JSON's "overlap").

Exposed: wall time during which some NCCL kernel of the rank runs and no compute kernel on the
same device does. Calls on several streams may overlap each other, so communication time is
the length of their union. A call without kernels (gloo, MPI) is exposed while its caller waits
for it: an asynchronous one (DDP's buckets, `async_op=True`) during the part of its execution
inside its caller's wait (`wait_start`..`wait_end`: `Work.wait`, or DDP's finalize for its
buckets), a synchronous one (its execution is its host range) the whole of it; an asynchronous
call whose wait was not seen says nothing of its exposure and is left out. Per process, its
communication is the union of those calls' executions, its exposed time the union of their
waited parts.

One pass in (s, e) order per process (its rank follows) and device, and per step for the step
scope: each call adds to the union only the part past the latest end before it,
[max(s, prev_e), e]; these parts are disjoint and cover the union. Compute hidden under a part
[a, e] is B(e) - B(a), B(t) the compute busy time before t on the device
(nsyscomm/ingest/busy.py): a is the call's own gpu_start or the gpu_end of the call that ended
latest before it, where the sources evaluated B (busy_at_start, busy_at_end); B never
decreases, so B(prev_e) is the largest busy_at_end before.

The parts are made in numpy: DuckDB's window (max over the preceding rows per partition, each
call once per scope) took both cores for several times what this takes on one.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TypeVar

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm import duck

T = TypeVar("T")

_CALLS = """SELECT rank, step, report, pid, device, gpu_start AS s, gpu_end AS e, busy_at_start, busy_at_end
            FROM collectives {only} WHERE gpu_start IS NOT NULL"""
# calls without kernels: execution (s, e) and the part of it the caller waited through (ws, we);
# not a Flight Recorder's, which records device work (NCCL's) with neither kernels nor a caller
_CPU_CALLS = """SELECT rank, step, report, pid, exec_start AS s, exec_end AS e,
                       CASE WHEN wait_end IS NOT NULL THEN greatest(exec_start, wait_start) ELSE exec_start END AS ws,
                       CASE WHEN wait_end IS NOT NULL THEN least(exec_end, wait_end) ELSE exec_end END AS we
                FROM collectives {only}
                WHERE gpu_start IS NULL AND exec_start IS NOT NULL AND exec_end IS NOT NULL
                  AND source IS DISTINCT FROM 'flight_recorder'
                  AND (wait_end IS NOT NULL OR (exec_start = cpu_start AND exec_end = cpu_end))"""
# the calls of one pass's processes (a process: its report and pid, which may be NULL)
_OF_PROCESSES = """SEMI JOIN (SELECT unnest($reports::VARCHAR[]) AS pass_report, unnest($pids::BIGINT[]) AS pass_pid)
                   ON pass_report IS NOT DISTINCT FROM report AND pass_pid IS NOT DISTINCT FROM pid"""
_PROCESSES = "SELECT report, pid, count(*) FROM collectives GROUP BY ALL ORDER BY ALL"
_SUMS = """SELECT rank, step, count(*) AS calls, sum(comm_rank_ns) AS comm_rank_ns,
                  sum(exposed_rank_ns) AS exposed_rank_ns, sum(comm_step_ns) AS comm_step_ns,
                  sum(exposed_step_ns) AS exposed_step_ns
           FROM call_parts GROUP BY rank, step"""

# The most calls one pass reads and holds (their columns take about 70 bytes each as read, and
# the numpy arrays a few hundred bytes a call at their peak, beside the job's database at its
# largest): past it, the processes are taken a few at a time, each process whole (a call's part
# depends only on the calls of its own process and device), each pass read by a query of its own.
PASS_CALLS = 100_000


def parts(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per rank and step of the job's `collectives` table, over its calls that ran kernels: their
    number (calls), and for each scope (the rank's whole run, the rank's step) the sum of what
    each call adds to the union of communication (comm_*_ns) and of the part of that no compute
    hides (exposed_*_ns); NULL where SQL's arithmetic on NULL times would give only NULLs."""
    sums = []
    counts = [((report, pid), n) for report, pid, n in con.execute(_PROCESSES).fetchall()]
    for processes in _chunks(counts):
        if processes is None:
            only, params = "", None
        else:
            only = _OF_PROCESSES
            params = {"reports": [r for r, _ in processes], "pids": [p for _, p in processes]}
        for query, make in ((_CALLS, _call_parts), (_CPU_CALLS, _cpu_call_parts)):
            calls = con.execute(query.format(only=only), params).to_arrow_table()
            con.register("call_parts", make(calls))
            del calls
            try:
                sums.append(con.execute(_SUMS).to_arrow_table())
            finally:
                con.unregister("call_parts")
    return pa.concat_tables(sums)


def _chunks(counts: list[tuple[T, int]], most: int | None = None) -> list[list[T] | None]:
    """The keys (processes, with their calls) in groups of at most `most` calls (PASS_CALLS), or
    one key's where it has more; [None]: all at once."""
    most = PASS_CALLS if most is None else most
    if sum(n for _, n in counts) <= most:
        return [None]
    out: list[list[T] | None] = []
    group: list[T] = []
    size = 0
    for key, n in counts:
        if group and size + n > most:
            out.append(group)
            group, size = [], 0
        group.append(key)
        size += n
    return out + [group]


def _call_parts(t: pa.Table) -> pa.Table:
    """Per call of t (_CALLS): its rank and step, and each scope's comm_*_ns and exposed_*_ns."""
    s = _ints(t["s"])[0]
    e, e_null = _ints(t["e"])
    bs, bs_null = _ints(t["busy_at_start"])
    be, be_null = _ints(t["busy_at_end"])
    step, step_null = _ints(t["step"])
    # the process and device a call ran on, as one number; then with its step
    where = _groups([_codes(t["report"]), *_ints(t["pid"]), *_ints(t["device"])])
    in_step = _groups([where, step, step_null])
    by_rank = np.lexsort((e, e_null, s, where))  # (s, e) order per device, e NULLS LAST as in SQL
    # the same per step: a stable sort keeps the (s, e) order within each group
    by_step = by_rank[np.argsort(in_step[by_rank], kind="stable")]
    out = {"rank": t["rank"], "step": t["step"]}
    for scope, order, group in (("rank", by_rank, where), ("step", by_step, in_step)):
        comm, exposed, null = _parts(order, group[order], s, e, e_null, bs, bs_null, be, be_null)
        out[f"comm_{scope}_ns"] = pa.array(comm, mask=null)
        out[f"exposed_{scope}_ns"] = pa.array(exposed, mask=null)
    return pa.table(out)


def _cpu_call_parts(t: pa.Table) -> pa.Table:
    """Per call without kernels (_CPU_CALLS): its rank and step, and per scope its part of the
    union of the process's executions (comm_*_ns) and of the union of their waited parts
    (exposed_*_ns): the same disjoint-part pass as the GPU calls', with no compute to hide them."""
    s, _ = _ints(t["s"])
    e, _ = _ints(t["e"])
    ws, _ = _ints(t["ws"])
    we = np.maximum(_ints(t["we"])[0], ws)  # a wait that ended before the call began: nothing waited
    step, step_null = _ints(t["step"])
    where = _groups([_codes(t["report"]), *_ints(t["pid"])])
    in_step = _groups([where, step, step_null])
    out = {"rank": t["rank"], "step": t["step"]}
    none = np.zeros(len(s), bool)
    zero = np.zeros(len(s), np.int64)
    for scope, group in (("rank", where), ("step", in_step)):
        for name, a, b in (("comm", s, e), ("exposed", ws, we)):
            order = np.lexsort((b, a, group))
            part, _, _ = _parts(order, group[order], a, b, none, zero, none, zero, none)
            out[f"{name}_{scope}_ns"] = pa.array(part, type=pa.int64())
    return pa.table(out)


def _parts(o, group, s, e, e_null, bs, bs_null, be, be_null):
    """comm and exposed ns per call (in the calls' own order), and where they are NULL; o: the
    calls in (group, s, e) order, group: their group in that order."""
    first = np.ones(len(o), bool)
    first[1:] = group[1:] != group[:-1]
    so, eo, en, beo, ben = s[o], e[o], e_null[o], be[o], be_null[o]
    prev_e, no_prev = _max_before(eo, en, first)
    prev_b, no_prev_b = _max_before(beo, ben, first)
    # a call that starts past every earlier end adds all of itself, one that ends past them
    # adds its tail, any other adds nothing
    fresh = no_prev | (so >= prev_e)
    tail = ~fresh & ~en & (eo > prev_e)
    comm = np.where(fresh, eo - so, np.where(tail, eo - prev_e, 0))
    hidden = np.where(fresh, beo - bs[o], np.where(tail, beo - prev_b, 0))
    hidden_null = (fresh & (ben | bs_null[o])) | (tail & (ben | no_prev_b))
    exposed = comm - np.where(hidden_null, 0, hidden)
    back = np.empty_like(o)
    back[o] = np.arange(len(o))
    return comm[back], exposed[back], (fresh & en)[back]


def _ints(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (0 where NULL) and its NULL mask."""
    return (pc.fill_null(col, 0).to_numpy().astype(np.int64, copy=False), col.is_null().to_numpy(zero_copy_only=False))


def _codes(col: pa.ChunkedArray) -> np.ndarray:
    return pc.dictionary_encode(col.combine_chunks()).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _groups(keys: list[np.ndarray]) -> np.ndarray:
    """Rows -> a number per distinct combination of the key columns (exact: no hashing)."""
    g = np.zeros(len(keys[0]), np.int64)
    for k in keys:
        codes, uniques = pd.factorize(k)
        g = pd.factorize(g * len(uniques) + codes)[0]
    return g


def _max_before(v: np.ndarray, null: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the largest non-NULL v of the rows before it in its group (rows sorted by group,
    first: where a group starts), and where there is none."""
    low = np.iinfo(np.int64).min
    running = pd.Series(np.where(null, low, v)).groupby(np.cumsum(first)).cummax().to_numpy()
    before = np.empty_like(running)
    before[:1] = low
    before[1:] = running[:-1]
    before[first] = low
    return before, before == low


def begin_overlap(con: duckdb.DuckDBPyConnection) -> Future:
    """parts() of the job's final `collectives`, on a thread of its own (with a cursor
    of its own: a DuckDB connection serves one thread at a time)."""
    return duck.on_cursor_soon(con, parts, "overlap")
