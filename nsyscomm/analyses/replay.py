"""A replay engine for a distributed job: every rank's operations, their dependencies inside the
rank and across ranks, and a recomputation of every timeline when durations change.

The model (the one of the OSDI'25 what-if study, see docs/whatif.md):

- an operation starts when all its predecessors have ended, plus its own launch delay (time
  the trace cannot explain: host work, data loading), or at its origin when it has none;
- a plain operation (compute, a local op) ends `dur` after it starts;
- a synchronising operation belongs to a group (one logical collective, or a send with its
  receive): the group starts when its last member has started (``reduce="max"``: as measured)
  or when its first one has (``reduce="min"``: the waiting removed), and each member ends
  `dur` (its transfer time) after the group starts;
- a member that did not wait for its group (``free``: a buffered send that returned before its
  receive was posted, an asynchronous call that ended before its last rank arrived) still counts
  in the group's start, but ends `dur` (its own duration) after its own start.

The graph is fixed; the durations are what a scenario changes, so one Graph serves every
replay. The cost is linear in operations and edges: the graph is cut into levels (a group is
one node) once, and each level is replayed with a few numpy calls for all its ranks at once.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nsyscomm import settings

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@dataclass
class Graph:
    """Operations 0..n-1 and their dependencies, cut into levels for the replay."""

    n: int
    group: np.ndarray  # int64: the synchronising group of each op, -1 for a plain op
    origin: np.ndarray  # float64: where an op without predecessors starts (before its delay)
    src: np.ndarray  # int64 edges src -> dst, sorted by the level of dst
    dst: np.ndarray
    order: np.ndarray  # ops sorted by level
    level_ptr: np.ndarray  # ops of level L: order[level_ptr[L]:level_ptr[L+1]]
    edge_ptr: np.ndarray  # edges into level L: src/dst[edge_ptr[L]:edge_ptr[L+1]]
    n_groups: int
    free: np.ndarray | None = None  # bool: the group members that do not wait for their group

    @property
    def levels(self) -> int:
        return len(self.level_ptr) - 1


class CycleError(ValueError):
    """The dependencies (with each group as one node) are not acyclic: no replay order exists."""


def build(
    n: int,
    src: ArrayLike,
    dst: ArrayLike,
    group: ArrayLike | None = None,
    origin: ArrayLike | None = None,
    free: ArrayLike | None = None,
) -> Graph:
    """The graph of n operations with edges src[i] -> dst[i] (dst starts after src ends) and
    synchronising groups (group[i] >= 0 joins op i to the other members of that group; free[i]:
    op i counts in its group's start but does not wait for it)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    group = np.full(n, -1, np.int64) if group is None else np.asarray(group, dtype=np.int64)
    origin = np.zeros(n) if origin is None else np.asarray(origin, dtype=np.float64)
    # a group is one node for ordering: its members end together, so all of them must follow
    # every predecessor of any member
    grouped = group >= 0
    _, inv = np.unique(group[grouped], return_inverse=True)
    n_groups = int(inv.max()) + 1 if len(inv) else 0
    node = np.empty(n, np.int64)
    node[grouped] = inv.reshape(-1)
    node[~grouped] = n_groups + np.arange(int((~grouped).sum()))
    n_nodes = int(node.max()) + 1 if n else 0
    ns, nd = node[src], node[dst]
    keep = ns != nd
    level_of_node = _levels(n_nodes, ns[keep], nd[keep])
    level = level_of_node[node]
    order = np.argsort(level, kind="stable")
    n_levels = int(level.max()) + 1 if n else 0
    level_ptr = np.searchsorted(level[order], np.arange(n_levels + 1))
    elevel = level[dst]
    eorder = np.argsort(elevel, kind="stable")
    src, dst = src[eorder], dst[eorder]
    edge_ptr = np.searchsorted(elevel[eorder], np.arange(n_levels + 1))
    dense_group = np.where(grouped, node, -1)  # group ids 0..n_groups-1
    free_ = np.zeros(n, bool) if free is None else np.asarray(free, dtype=bool) & grouped
    return Graph(n, dense_group, origin, src, dst, order, level_ptr, edge_ptr, n_groups, free_)


def _levels(n_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Longest-path level of each node (Kahn's algorithm, one frontier at a time)."""
    level = np.zeros(n_nodes, np.int64)
    if n_nodes == 0:
        return level
    fast = _replay_module()
    if fast is not None:  # the same frontiers in C (nsyscomm/analyses/_replay.c)
        done = fast.levels(
            n_nodes, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64), level
        )
        if done < n_nodes:
            raise CycleError(f"{n_nodes - done} operation(s) wait on each other in a cycle")
        return level
    indeg = np.bincount(dst, minlength=n_nodes)
    eo = np.argsort(src, kind="stable")
    s_sorted, d_sorted = src[eo], dst[eo]
    out_ptr = np.searchsorted(s_sorted, np.arange(n_nodes + 1))
    frontier = np.flatnonzero(indeg == 0)
    done, lv = 0, 0
    while len(frontier):
        level[frontier] = lv
        done += len(frontier)
        lo, hi = out_ptr[frontier], out_ptr[frontier + 1]
        counts = hi - lo
        if counts.sum() == 0:
            break
        # the out-edges of the whole frontier, gathered without a Python loop
        idx = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts) + np.arange(counts.sum())
        targets = d_sorted[idx]
        dec = np.bincount(targets, minlength=n_nodes)
        before = indeg.copy()
        indeg -= dec
        frontier = np.flatnonzero((indeg == 0) & (before > 0))
        lv += 1
    if done < n_nodes:
        raise CycleError(f"{n_nodes - done} operation(s) wait on each other in a cycle")
    return level


def replay(
    g: Graph, dur: ArrayLike, delay: ArrayLike | None = None, reduce: str | ArrayLike = "max"
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every op under these durations (transfer times for group members) and
    launch delays. reduce: "max" a group starts when its last member arrives; "min" when its
    first does (nobody waits for a late member; the late member is then shown starting with
    the group); or a boolean array over groups, True where "min" applies."""
    dur = np.asarray(dur, dtype=np.float64)
    delay = np.zeros(g.n) if delay is None else np.asarray(delay, dtype=np.float64)
    if isinstance(reduce, str):
        if reduce not in ("max", "min"):
            raise ValueError(f"reduce must be 'max' or 'min', not {reduce!r}")
        use_min = np.full(max(g.n_groups, 1), reduce == "min")
    else:
        use_min = np.asarray(reduce, dtype=bool)
    any_min, all_min = bool(use_min.any()), bool(use_min.all())
    fill = np.where(use_min, np.inf, -np.inf)
    ready = np.full(g.n, -np.inf)
    has_pred = np.zeros(g.n, bool)
    has_pred[g.dst] = True
    ready[~has_pred] = g.origin[~has_pred]
    start = np.empty(g.n)
    end = np.empty(g.n)
    gstart = fill.astype(np.float64).copy()
    free = np.zeros(g.n, bool) if g.free is None else g.free
    fast = _replay_module()
    if fast is not None:  # the same loop in C (nsyscomm/analyses/_replay.c): one level costs no array calls
        i64 = [
            np.ascontiguousarray(a, dtype=np.int64) for a in (g.order, g.level_ptr, g.edge_ptr, g.src, g.dst, g.group)
        ]
        fast.replay(
            *i64,
            np.ascontiguousarray(dur),
            np.ascontiguousarray(delay),
            ready,
            np.ascontiguousarray(use_min, dtype=np.uint8),
            any_min,
            start,
            end,
            gstart,
            np.ascontiguousarray(free, dtype=np.uint8),
        )
        return start, end
    for L in range(g.levels):
        e0, e1 = g.edge_ptr[L], g.edge_ptr[L + 1]
        if e1 > e0:
            np.maximum.at(ready, g.dst[e0:e1], end[g.src[e0:e1]])
        ops = g.order[g.level_ptr[L] : g.level_ptr[L + 1]]
        st = ready[ops] + delay[ops]
        start[ops] = st
        grp = g.group[ops]
        plain = grp < 0
        end[ops[plain]] = st[plain] + dur[ops[plain]]
        if not plain.all():
            sync_ops, sync_grp, sync_st = ops[~plain], grp[~plain], st[~plain]
            if all_min:
                np.minimum.at(gstart, sync_grp, sync_st)
            elif not any_min:
                np.maximum.at(gstart, sync_grp, sync_st)
            else:
                m = use_min[sync_grp]
                np.minimum.at(gstart, sync_grp[m], sync_st[m])
                np.maximum.at(gstart, sync_grp[~m], sync_st[~m])
            bound = ~free[sync_ops]
            sync_ops, sync_grp, sync_st = sync_ops[bound], sync_grp[bound], sync_st[bound]
            if any_min:  # a late member of a group that did not wait for it starts with the group
                start[sync_ops] = np.minimum(sync_st, gstart[sync_grp])
            end[sync_ops] = gstart[sync_grp] + dur[sync_ops]
            loose = ops[~plain][~bound]
            end[loose] = start[loose] + dur[loose]
    return start, end


def _replay_module():
    """nsyscomm.analyses._replay, or None where it was not built (no C compiler) or NSYSCOMM_REPLAY_PY is set."""
    if settings.replay_py():
        return None
    try:
        _replay = importlib.import_module("nsyscomm.analyses._replay")  # built only where C compiles
    except ImportError:
        return None
    # a build older than this module's call convention is left unused
    return _replay if getattr(_replay, "ABI", 1) >= 2 else None


def transfer_times(g: Graph, start: ArrayLike, end: ArrayLike) -> np.ndarray:
    """Each group member's transfer time as measured: its end minus its group's last arrival
    (never negative: clocks of two hosts can disagree by a little); a free member's: its own
    duration."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    last = np.full(max(g.n_groups, 1), -np.inf)
    m = g.group >= 0
    np.maximum.at(last, g.group[m], start[m])
    out = end - start
    out[m] = np.maximum(end[m] - last[g.group[m]], 0.0)
    if g.free is not None:
        out[g.free] = (end - start)[g.free]
    return out


def free_members(group: ArrayLike, start: ArrayLike, end: ArrayLike) -> np.ndarray:
    """The group members that evidently did not wait for their group: measured to end before its
    last member arrived (a buffered send, an asynchronous call timed as its enqueue)."""
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    m = group >= 0
    _, inv = np.unique(group[m], return_inverse=True)
    last = np.full(int(inv.max()) + 1 if len(inv) else 1, -np.inf)
    np.maximum.at(last, inv.reshape(-1), start[m])
    out = np.zeros(len(group), bool)
    out[m] = end[m] < last[inv.reshape(-1)]
    return out


def launch_delays(g: Graph, start: ArrayLike, end: ArrayLike) -> np.ndarray:
    """Each op's start minus the moment it could have started (its predecessors' last end, or
    its origin): the time the dependency model does not explain."""
    start = np.asarray(start, dtype=np.float64)
    end = np.asarray(end, dtype=np.float64)
    ready = np.full(g.n, -np.inf)
    np.maximum.at(ready, g.dst, end[g.src])
    none = ~np.isfinite(ready)
    ready[none] = g.origin[none]
    return start - ready
