"""The what-if analysis of the OSDI'25 straggler study on a per-op trace (the artifact's format):
replayed as measured, without launch delays, and ideal (every op at its type's typical
duration); the slowdown S = actual / ideal step time; its attribution to DP ranks, pipeline
stages and op types; the M_S and M_W metrics. All replays run on nsyscomm.analyses.replay.

Times are in seconds here, as in the trace; the views convert to ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nsyscomm.analyses import pipeline_deps, replay

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# a launch delay this negative is a clock or model artefact, not time: it is dropped (as the artifact does)
NEGATIVE_DELAY_S = 1e-2
# M_W: the share of ranks (percent, rounded up) named as the individual worker problem
MW_TOP_PERCENT = 3
PP_COMM = {
    "forward-send": "forward-pp-comm",
    "forward-recv": "forward-pp-comm",
    "backward-send": "backward-pp-comm",
    "backward-recv": "backward-pp-comm",
}


@dataclass
class Trace:
    """A job's per-op trace, its dependency graph and the measured durations and delays."""

    ops: pd.DataFrame  # the trace's rows, index 0..n-1
    meta: dict
    graph: replay.Graph
    dur: np.ndarray  # measured: duration of a plain op, transfer time of a group member
    delay: np.ndarray  # measured launch delay
    step_code: np.ndarray  # each op's step as 0..S-1
    steps: np.ndarray  # the step numbers
    step_start: np.ndarray  # each step's first start
    ideal_dur: np.ndarray  # each op at its type's typical duration (ideal_durations)

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def step_times(self, end: np.ndarray) -> np.ndarray:
        """Each step's time: its last op's end minus the step's start."""
        last = np.full(self.n_steps, -np.inf)
        np.maximum.at(last, self.step_code, end)
        return last - self.step_start

    def run(
        self, dur: ArrayLike | None = None, delay: ArrayLike | None = None, reduce: str | ArrayLike = "max"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, step times) of a replay (measured durations and delays by default)."""
        start, end = replay.replay(
            self.graph, self.dur if dur is None else dur, self.delay if delay is None else delay, reduce
        )
        return start, end, self.step_times(end)


def prepare(ops: pd.DataFrame, meta: dict) -> Trace:
    ops = ops.reset_index(drop=True)
    dp, pp = int(meta.get("dp_size", 1)), int(meta.get("pp_size", 1))
    src, dst, group = pipeline_deps.build(ops, dp, pp)
    steps, step_code = np.unique(ops["step"].to_numpy(), return_inverse=True)
    start = ops["start_ts"].to_numpy(np.float64)
    end = start + ops["duration"].to_numpy(np.float64)
    step_start = np.full(len(steps), np.inf)
    np.minimum.at(step_start, step_code, start)
    g = replay.build(len(ops), src, dst, group, origin=step_start[step_code])
    dur = replay.transfer_times(g, start, end)
    delay = replay.launch_delays(g, start, end)
    delay[delay <= -NEGATIVE_DELAY_S] = 0.0
    return Trace(ops, meta, g, dur, delay, step_code, steps, step_start, ideal_durations(ops, dur))


def ideal_durations(ops: pd.DataFrame, dur: np.ndarray) -> np.ndarray:
    """Every op at its type's typical duration over all workers and steps: the mean for computes,
    the median for communication (whose rare long waits the mean would keep)."""
    ot = ops["optype"].astype(str)
    s = pd.Series(dur)
    comm = ot.isin(pipeline_deps.COMM_TYPES).to_numpy()
    mean = s.groupby(ot.to_numpy()).transform("mean").to_numpy()
    median = s.groupby(ot.to_numpy()).transform("median").to_numpy()
    return np.where(comm, median, mean)


def _ratio(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(a) / np.mean(b))


def analyse(t: Trace, attribute: bool = True) -> dict:
    """The artifact's result fields, computed by nsyscomm's replay."""
    start = t.ops["start_ts"].to_numpy(np.float64)
    end = start + t.ops["duration"].to_numpy(np.float64)
    base = t.step_times(end)
    zero = np.zeros(t.graph.n)
    _, _, nodelay = t.run(delay=zero)
    _, _, ideal = t.run(dur=t.ideal_dur, delay=zero)
    steps = [int(s) for s in t.steps]
    out = {
        "step_t_base": dict(zip(steps, base.tolist())),
        "step_t_nodelay": dict(zip(steps, nodelay.tolist())),
        "step_t_noblk": dict(zip(steps, ideal.tolist())),
        "launch_slowdown": _ratio(base, nodelay),
        "blocking_slowdown": _ratio(nodelay, ideal),
        "blocking_step_slowdown": dict(zip(steps, (nodelay / ideal).tolist())),
    }
    if attribute:
        overall = {}
        for by in ("dp_rank", "stage", "optype"):
            overall[by], per_step = decompose(t, by, ideal)
            out[f"blocking_decompose_by_{by}"] = overall[by]
            out[f"blocking_decompose_by_{by}_per_step"] = per_step
        out["ms"] = m_s(t, nodelay, ideal)
        out["mw"] = m_w(t, nodelay, ideal, overall["dp_rank"], overall["stage"])
    return out


def labels(t: Trace, by: str) -> np.ndarray:
    if by == "optype":  # a send and its receive are one pipeline transfer
        ot = t.ops["optype"].astype(str)
        return ot.map(lambda x: PP_COMM.get(x, x)).to_numpy()
    return t.ops[by].to_numpy()


def decompose(t: Trace, by: str, ideal: np.ndarray) -> tuple[dict, dict]:
    """S of each group of ops: the ideal replay with only this group's ops at their measured
    durations where those are longer than the typical one, over the ideal step time (1.0: the
    group costs nothing; never below, as an op faster than its type's mean slows nobody)."""
    lab = labels(t, by)
    zero = np.zeros(t.graph.n)
    overall: dict = {}
    per_step: dict[int, dict] = {}
    slow = np.maximum(t.dur, t.ideal_dur)
    for key in pd.unique(lab):
        m = lab == key
        dur = np.where(m, slow, t.ideal_dur)
        _, _, st = t.run(dur=dur, delay=zero)
        k = key.item() if hasattr(key, "item") else key
        overall[k] = _ratio(st, ideal)
        for s, v in zip(t.steps.tolist(), (st / ideal).tolist()):
            per_step.setdefault(int(s), {})[k] = v
    order = lambda d: dict(sorted(d.items(), key=lambda kv: -kv[1]))  # noqa: E731
    return order(overall), {s: order(d) for s, d in per_step.items()}


def _explain(t: Trace, mask: np.ndarray, nodelay: np.ndarray, ideal: np.ndarray) -> dict:
    """Share of the slowdown the masked ops explain: their straggling removed from the no-delay
    replay (rem) and added to the ideal one (add). Only an op slower than its type's typical
    duration straggles: removing it shortens it to the typical one, adding it back lengthens the
    typical one to it. Replacing every masked op by the typical duration instead (the artifact's
    way) lengthens the ops faster than typical, and the "removal" of a stage that does not
    straggle made the job slower: a negative share on the artifact's own 64-rank trace. The
    replay never ends sooner for a longer op, so both shares are >= 0. None where the ideal
    replay is no faster than the no-delay one: there is no slowdown to share."""
    zero = np.zeros(t.graph.n)
    _, _, rem = t.run(dur=np.where(mask, np.minimum(t.dur, t.ideal_dur), t.dur), delay=zero)
    _, _, add = t.run(dur=np.where(mask, np.maximum(t.dur, t.ideal_dur), t.ideal_dur), delay=zero)
    tori, tideal, trem, tadd = (float(np.mean(x)) for x in (nodelay, ideal, rem, add))
    span = tori - tideal
    return {
        "trem": trem,
        "tadd": tadd,
        "tori": tori,
        "tideal": tideal,
        "rem": (tori - trem) / span if span > 0 else None,
        "add": (tadd - tideal) / span if span > 0 else None,
    }


def m_s(t: Trace, nodelay: np.ndarray, ideal: np.ndarray) -> dict:
    """M_S: the share of the slowdown the last pipeline stage explains (stage partitioning)."""
    stage = t.ops["stage"].to_numpy()
    r = _explain(t, stage == stage.max(), nodelay, ideal)
    r["Ms"] = r["rem"]
    return r


def m_w(t: Trace, nodelay: np.ndarray, ideal: np.ndarray, by_dp: dict, by_stage: dict) -> dict:
    """M_W: the share the worst few workers explain (individual worker problems). A worker's
    score is the smaller of its DP rank's and its stage's S; the top MW_TOP_PERCENT % are taken."""
    w = t.ops[["rank", "dp_rank", "stage"]].drop_duplicates("rank")
    score = [min(by_dp.get(int(d), 1.0), by_stage.get(int(s), 1.0)) for d, s in zip(w["dp_rank"], w["stage"])]
    w = w.assign(score=score).sort_values(["score", "rank"], ascending=[False, True])
    top = w["rank"].head(math.ceil(len(w) * MW_TOP_PERCENT / 100)).to_numpy()
    r = _explain(t, t.ops["rank"].isin(top).to_numpy(), nodelay, ideal)
    r["Mw"] = r["rem"]
    r["ranks"] = [int(x) for x in top]
    return r
