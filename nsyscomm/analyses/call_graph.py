"""The replay graph of a job whose calls are timed on the host (gloo, MPI: no kernels), as its
ranks ran them: each rank's host thread is one chain of events -- it issues a call, computes,
waits for an asynchronous call, computes again -- and each call's execution is a node of its own
that starts once its rank issued it and its queue let it run, and ends its transfer time after
its collective's last rank started it.

A rank's compute lies between its host events, and only there: an asynchronous call's time from
its issue to its rank's wait for it is compute that the call overlapped, not communication. Only
the time before a collective's issue is what a scenario may take as a late rank's delay
(whatif.scenarios), so removing waiting never shortens the rest of a rank's own work. (Chaining
the calls themselves, as a device-timed job is chained, would turn that overlap into negative
gaps after calls that end late: shortening those would move the calls after them to before their
own issue.)

Nodes, for the n calls of sql/replay_ops.sql in their order:

- issue (0..n-1): the host reaching the call, at its enqueue (no duration);
- execution (n..2n-1): the call's work, after its issue and after the call it queued behind on
  its process group (of the calls on its rank and group, the one that ended last before it
  started: gloo's worker threads take a group's calls in the order enqueued);
- a wait's start and its return (after the execution), for a call its caller waited for.

The host goes on after an asynchronous call's issue, and meets its execution again where it
waits for it; it goes on after the execution of a call it was not seen to wait for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

# node kinds
ISSUE, EXEC, WAIT, RETURN = 0, 1, 2, 3


@dataclass
class CallGraph:
    """The nodes and edges of a host-timed job, with each node's measured span (ms)."""

    call: np.ndarray  # int64: the call (row of the ops) each node belongs to
    kind: np.ndarray  # int8: ISSUE, EXEC, WAIT or RETURN
    start: np.ndarray  # float64 ms
    end: np.ndarray
    src: np.ndarray  # int64 edges src -> dst
    dst: np.ndarray

    @property
    def n(self) -> int:
        return len(self.call)


def applies(ops: pd.DataFrame) -> bool:
    """Whether the job is modelled by its host: no call timed by kernels (a device-timed job's
    compute lies between its kernels, on the device, and its calls are chained there)."""
    need = {"issue_ns", "wait_start_ns", "wait_end_ns", "queue", "queued_ns", "device_timed"}
    if not need <= set(ops.columns) or ops.empty:
        return False
    return not ops["device_timed"].fillna(False).astype(bool).any() and bool(ops["issue_ns"].notna().all())


def build(ops: pd.DataFrame) -> CallGraph:
    """The nodes and edges of the job's calls (sql/replay_ops.sql, which orders each rank's calls)."""
    n = len(ops)
    rank = ops["rank"].to_numpy()
    ms = 1e6
    issue = ops["issue_ns"].to_numpy(np.float64) / ms
    xs = ops["start_ns"].to_numpy(np.float64) / ms
    xe = ops["end_ns"].to_numpy(np.float64) / ms
    ws = ops["wait_start_ns"].to_numpy(np.float64) / ms
    we = ops["wait_end_ns"].to_numpy(np.float64) / ms
    waited = np.isfinite(ws) & np.isfinite(we)
    # without a wait seen, the host is taken to have blocked until the work was done (a call
    # whose range ends at its enqueue may wait inside, as DDP's do): its end comes before the
    # first host event at or after it, which a call that did not block delays by nothing
    blocking = ~waited
    k = int(waited.sum())
    wi = np.flatnonzero(waited)
    call = np.concatenate([np.arange(n), np.arange(n), wi, wi])
    kind = np.concatenate([np.full(n, ISSUE), np.full(n, EXEC), np.full(k, WAIT), np.full(k, RETURN)]).astype(np.int8)
    start = np.concatenate([issue, xs, ws[wi], we[wi]])
    end = np.concatenate([issue, xe, ws[wi], we[wi]])
    exec_of = n + np.arange(n)
    src = [np.arange(n)]  # issue -> execution
    dst = [exec_of]
    q = _queue_ahead(ops, xs, xe)
    has_q = q >= 0
    src.append(exec_of[q[has_q]])
    dst.append(exec_of[has_q])
    # a wait returns once its call's work is done
    wait_node = 2 * n + np.arange(k)
    ret_node = 2 * n + k + np.arange(k)
    src += [wait_node, exec_of[wi]]
    dst += [ret_node, ret_node]
    # the host chain: issues and waits in the host's time order, each after the one before it;
    # and a blocking call's execution or a wait's return (the host blocked until then) before
    # the first host event at or after its end (waits can nest: DDP waits for a bucket inside
    # its wait for the backward's future)
    h_node = np.concatenate([np.arange(n), wait_node])
    h_time = np.concatenate([issue, ws[wi]])
    h_rank = np.concatenate([rank, rank[wi]])
    blocks = np.concatenate([blocking, np.ones(k, bool)])
    h_exit = np.concatenate([exec_of, ret_node])
    h_exit_end = np.concatenate([xe, we[wi]])
    # (ties: an issue before a wait at the same instant, then the ops' order)
    order = np.lexsort((h_node, h_time, h_rank))
    h_node, h_time, h_rank = h_node[order], h_time[order], h_rank[order]
    blocks, h_exit, h_exit_end = blocks[order], h_exit[order], h_exit_end[order]
    same = h_rank[1:] == h_rank[:-1]
    src.append(h_node[:-1][same])
    dst.append(h_node[1:][same])
    for lo, hi in _runs(h_rank):
        times = h_time[lo:hi]
        b = np.flatnonzero(blocks[lo:hi] & np.isfinite(h_exit_end[lo:hi]))
        nxt = np.maximum(np.searchsorted(times, h_exit_end[lo:hi][b], side="left"), b + 1)
        ok = nxt < hi - lo
        src.append(h_exit[lo:hi][b[ok]])
        dst.append(h_node[lo:hi][nxt[ok]])
    return CallGraph(call, kind, start, end, np.concatenate(src), np.concatenate(dst))


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal values in a sorted array."""
    cut = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate(([0], cut, [len(values)]))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def _queue_ahead(ops: pd.DataFrame, xs: np.ndarray, xe: np.ndarray) -> np.ndarray:
    """Per call, the call it queued behind: of the calls on the same rank and process group, the
    one that ended last before its execution started (a worker thread was free then; a source
    that times the work on the worker itself starts it a little after), or -1 where it waited in
    no queue."""
    n = len(ops)
    out = np.full(n, -1, np.int64)
    queued = ops["queued_ns"].fillna(0).to_numpy() > 0
    if not queued.any():
        return out
    key = ops["rank"].astype(str).to_numpy() + "|" + ops["queue"].astype(str).to_numpy()
    ends = pd.DataFrame({"key": key, "at": xe, "ahead": np.arange(n)}).sort_values("at", kind="stable")
    late = pd.DataFrame({"key": key[queued], "at": xs[queued], "row": np.flatnonzero(queued)})
    pairs = pd.merge_asof(late.sort_values("at", kind="stable"), ends, on="at", by="key", direction="backward")
    pairs = pairs[pairs["ahead"].notna() & (pairs["ahead"] != pairs["row"])]
    out[pairs["row"].to_numpy()] = pairs["ahead"].to_numpy(np.int64)
    return out
