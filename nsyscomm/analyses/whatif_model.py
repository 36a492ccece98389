"""The replayable model of a job (docs/whatif.md): its dependency graph, each operation's measured
duration and delay, its ideal ones, and the labels the what-if reports by. Built from the
collectives table (a host-timed job as host events and executions, nsyscomm.analyses.call_graph;
a device-timed job as each rank's chain of calls) or from a per-op trace of the OSDI'25 artifact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsyscomm.analyses import call_graph, replay, stragglers

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass
class Model:
    """A job ready to replay: graph, measured durations and delays in ms, labels per op."""

    graph: replay.Graph
    dur: np.ndarray
    delay: np.ndarray
    step_of: np.ndarray  # each op's step code (-1: no step)
    steps: list  # step numbers (None: the job as one step)
    key: np.ndarray  # the (op, bytes, caller) or op type label of each op
    labels: dict  # attribution dimension -> label per op
    ideal_dur: np.ndarray
    ideal_delay: np.ndarray
    chained_steps: bool = True  # steps follow each other (False: each from its own start)
    attribute_delays: bool = True  # attribution puts back measured delays too (the artifact: durations only)
    step_origin: np.ndarray | None = None
    notes: list = field(default_factory=list)
    # the steps the job's figures count: warm-up steps left out (nsyscomm.analyses.warmup); None: all
    steady: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    # each step's time in the trace itself (None: the input gives none, as a per-op trace's own
    # replay is its measurement) and the whole capture's span, the bounds of every replayed figure
    measured: np.ndarray | None = None
    capture_ms: float | None = None
    # the operations whose spans time the steps (a host-timed job's call executions; None: all)
    timed: np.ndarray | None = None

    def step_ms(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        n = len(self.steps)
        m = self.step_of >= 0
        if self.timed is not None:
            m &= self.timed
        last = np.full(n, -np.inf)
        np.maximum.at(last, self.step_of[m], end[m])
        if not self.chained_steps:
            return last - self.step_origin
        first = np.full(n, np.inf)
        np.minimum.at(first, self.step_of[m], start[m])
        # a step ends once every step up to it has ended: an operation of one step may end after
        # the next step's last one (an asynchronous call waited for a step later)
        end_of = np.maximum.accumulate(last)
        prev = np.concatenate(([first[0]], end_of[:-1]))
        return end_of - prev

    def kept(self, per_step: np.ndarray) -> np.ndarray:
        """The figures of the steps the job's figures count (warm-up steps left out)."""
        return per_step if self.steady is None else per_step[self.steady]

    def set_warmup(self, warmup: set) -> None:
        """Leave the warm-up steps out of the job's figures (never every step)."""
        keep = np.array([s not in warmup for s in self.steps])
        if keep.any() and not keep.all():
            self.steady = keep
            left = ", ".join(str(s) for s, k in zip(self.steps, keep) if not k)
            self.notes.append(
                f"warm-up step(s) {left} left out of the job's figures (saved_ms, step_ms_before/after, slowdown, "
                "total_saved_ms, top keys, attribution); their rows under steps say warmup"
            )

    def run(
        self, dur: ArrayLike | None = None, delay: ArrayLike | None = None, reduce: str | ArrayLike = "max"
    ) -> np.ndarray:
        s, e = replay.replay(
            self.graph, self.dur if dur is None else dur, self.delay if delay is None else delay, reduce
        )
        return self.step_ms(s, e)


def from_ops(ops: pd.DataFrame) -> Model:
    """The model of a job read into the collectives table (sql/replay_ops.sql). A job timed on the
    host (gloo, MPI) replays its ranks' host events and its calls' executions apart
    (nsyscomm.analyses.call_graph): the time between host events is compute, kept as measured; a
    device-timed job (NCCL) chains each rank's calls, the time between two being its compute."""
    n = len(ops)
    rank = ops["rank"].to_numpy()
    start = ops["start_ns"].to_numpy(np.float64) / 1e6
    end = ops["end_ns"].to_numpy(np.float64) / 1e6
    sync = ops["sync_id"].to_numpy()
    sizes = pd.Series(sync).map(pd.Series(sync).value_counts()).to_numpy()
    group = np.where(sizes > 1, pd.factorize(sync)[0], -1)
    if call_graph.applies(ops):
        try:
            return _from_host(ops, call_graph.build(ops), group)
        except replay.CycleError:  # ranks that issued calls in different orders: chained as below
            pass
    src, dst = _rank_edges(rank, end, group)
    g = replay.build(n, src, dst, group, start.copy(), replay.free_members(group, start, end))
    return _model(ops, g, np.arange(n), np.zeros(n, np.int8), start, end, group)


def _from_host(ops: pd.DataFrame, cg: call_graph.CallGraph, group: np.ndarray) -> Model:
    """The model of a host-timed job: executions as members of their collective (those that ended
    before their last rank arrived do not wait for it), issues and waits plain."""
    call_group = group[cg.call]
    is_exec = cg.kind == call_graph.EXEC
    node_group = np.where(is_exec, call_group, -1)
    free = np.zeros(cg.n, bool)
    free[is_exec] = replay.free_members(node_group[is_exec], cg.start[is_exec], cg.end[is_exec])
    # an issue waits for no other rank's (ranks may issue calls on two groups in either order):
    # its collective's other issues are its arrival group (extra["arrival"]), for no_straggler
    # (each rank's time before it) and the own-work floor, not a group of the replay
    a = (cg.kind == call_graph.ISSUE) & (call_group >= 0)
    # a rank's first event, when it reaches a collective, counts from that collective's first
    # arrival, as every later event from the one before it: a rank that reaches its first
    # collective late is late there as anywhere (where start-up explains it, no_straggler keeps it)
    origin = cg.start.copy()
    origin[a] = pd.Series(cg.start[a]).groupby(call_group[a]).transform("min").to_numpy()
    g = replay.build(cg.n, cg.src, cg.dst, node_group, origin, free)
    m = _model(ops, g, cg.call, cg.kind, cg.start, cg.end, group, timed=is_exec)
    # (the replay's id of the collective: its execution's group; call_graph numbers a call's
    # execution after the n issues)
    m.extra["arrival"] = np.where(a, g.group[len(ops) + cg.call], -1)
    return m


def _model(
    ops: pd.DataFrame,
    g: replay.Graph,
    call: np.ndarray,
    kind: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    group: np.ndarray,
    timed: np.ndarray | None = None,
) -> Model:
    """The Model of a graph whose nodes belong to the calls `call` (rows of ops; kind: their part
    of the call); timed: the nodes that time the steps (the calls' executions; None: all)."""
    n = g.n
    rank = ops["rank"].to_numpy()[call]
    dur = replay.transfer_times(g, start, end)
    delay = replay.launch_delays(g, start, end)
    step = ops["step"]
    steps: list  # step numbers; [None]: the job as one step
    if step.notna().any():
        steps = sorted(int(s) for s in step.dropna().unique())
        step_of = np.where(step.notna(), np.searchsorted(steps, step.fillna(-1).astype(np.int64)), -1)[call]
    else:
        steps, step_of = [None], np.zeros(n, np.int64)
    # a call's key is its collective's, as the summary's row: the least size its ranks send, so
    # that an all-to-all with uneven split sizes is one key, its saving counted once
    size = ops["bytes"].groupby(ops["sync_id"]).transform("min").fillna(ops["bytes"])
    bytes_ = size.astype("Int64").astype(str).replace("<NA>", "?")
    key = (ops["op"].astype(str) + " " + bytes_ + " " + ops["caller"].astype(str)).str.strip().to_numpy()[call]
    # ideal: the median over the collective's ranks of the time before it (before each of its
    # parts, on a host-timed job) and of its transfer; a rank that joined early under Join has no
    # work of its own there (its calls only shadow the others'): the median of the ranks still
    # training, where there are any, and its shadows as measured (given the others' compute, a
    # shadow issued once the one before it ended would come later than any of them did)
    call_group = group[call]
    kin = pd.Series(np.where(call_group >= 0, call_group * 4 + kind, -1))
    joined = (ops["joined"].to_numpy(bool) if "joined" in ops else np.zeros(len(ops), bool))[call]
    med_delay = _median_of_working(delay, joined, kin)
    med_dur = _median_of_working(dur, joined, kin)
    ideal_delay = np.where((call_group >= 0) & ~joined, med_delay, delay)
    ideal_dur = np.where((call_group >= 0) & ~joined, med_dur, dur)
    m = Model(g, dur, delay, step_of, steps, key, {"rank": rank, "op": key}, ideal_dur, ideal_delay)
    m.timed = timed
    m.measured = m.step_ms(start, end)
    m.capture_ms = float(end.max() - start.min()) if n else 0.0
    m.extra["call_node"] = np.flatnonzero(timed) if timed is not None else np.arange(n)
    m.extra["exposed_ms"] = ops["exposed_ns"].to_numpy(np.float64)[call] / 1e6
    m.extra["bytes"] = ops["bytes"].to_numpy(np.float64)[call]
    m.extra["op"] = ops["op"].to_numpy()[call]
    m.extra["p2p"] = ops["op"].isin(("send", "recv")).to_numpy()[call]
    for flag in ("startup", "shadow"):
        m.extra[flag] = (ops[flag].to_numpy(bool) if flag in ops else np.zeros(len(ops), bool))[call]
    return m


def _median_of_working(values: np.ndarray, joined: np.ndarray, groups: pd.Series) -> np.ndarray:
    """Per op, the median of its group's values over the ops of ranks that had not joined (all of
    them where every rank had)."""
    every = pd.Series(values).groupby(groups).transform("median")
    working = pd.Series(np.where(joined, np.nan, values)).groupby(groups).transform("median")
    return working.fillna(every).to_numpy()


def _rank_edges(rank: np.ndarray, end: np.ndarray, group: np.ndarray, lookback: int = 8):
    """Each call depends on the latest earlier call of its rank that finished before it. Calls
    that overlap (asynchronous collectives on several streams) can finish in another order on
    another rank: following the order of the measured ends (a group's latest end) keeps the
    graph acyclic. A call with no such call within `lookback` starts where it was measured."""
    n = len(rank)
    node = np.where(group >= 0, group, group.max(initial=-1) + 1 + np.arange(n))
    key = pd.Series(end).groupby(node).transform("max").to_numpy()
    pos = np.empty(n, np.int64)
    pos[np.lexsort((node, key))] = np.arange(n)
    pos = pd.Series(pos).groupby(node).transform("min").to_numpy()  # one position per group
    pred = np.full(n, -1, np.int64)
    for off in range(1, lookback + 1):
        v = np.arange(off, n)
        u = v - off
        ok = (pred[v] < 0) & (rank[u] == rank[v]) & (pos[u] < pos[v])
        pred[v[ok]] = u[ok]
    has = pred >= 0
    return pred[has], np.flatnonzero(has)


def from_trace(trace: stragglers.Trace) -> Model:
    """The model of a per-op trace (the artifact's format), its pipeline dependencies included."""
    ops = trace.ops
    key = ops["optype"].astype(str).to_numpy()
    lab = {
        "rank": ops["rank"].to_numpy(),
        "dp_rank": ops["dp_rank"].to_numpy(),
        "stage": ops["stage"].to_numpy(),
        "optype": stragglers.labels(trace, "optype"),
    }
    zero = np.zeros(trace.graph.n)
    m = Model(
        trace.graph,
        trace.dur * 1e3,
        trace.delay * 1e3,
        trace.step_code,
        [int(s) for s in trace.steps],
        key,
        lab,
        trace.ideal_dur * 1e3,
        zero,
        chained_steps=False,
        step_origin=np.zeros(trace.n_steps),
        attribute_delays=False,
    )
    # the graph's origins are in seconds: replays here scale them with the durations
    m.graph = replay.Graph(**{**trace.graph.__dict__, "origin": trace.graph.origin * 1e3})
    m.step_origin = trace.step_start * 1e3
    start = ops["start_ts"].to_numpy(np.float64) * 1e3
    end = start + ops["duration"].to_numpy(np.float64) * 1e3
    m.measured = m.step_ms(start, end)
    m.capture_ms = float(end.max() - start.min()) if len(ops) else 0.0
    comm = ops["optype"].astype(str).isin(stragglers.pipeline_deps.COMM_TYPES).to_numpy()
    m.extra["comm"] = comm
    m.extra["p2p"] = ops["optype"].astype(str).isin(stragglers.pipeline_deps.P2P).to_numpy()
    return m
