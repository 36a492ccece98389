"""What-if scenarios of a job, each one replay of nsyscomm.analyses.replay: the diagnosis'
`what_if` rows (per step and for the job), the top (op, bytes, caller) keys of each scenario,
and the attribution of the slowdown to ranks and ops (and, for a per-op trace of the OSDI'25
artifact, to DP ranks, stages and op types). The model is in docs/whatif.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nsyscomm.analyses import whatif_check
from nsyscomm.analyses.whatif_model import Model, from_ops, from_trace

__all__ = ["Model", "analyse", "attribution", "from_ops", "from_trace", "scenarios"]

TOP_KEYS = 10  # keys listed per scenario
MAX_KEYS = 20  # keys replayed one by one (the largest by measured time)
MAX_RANKS = 64  # ranks attributed one by one (the ones furthest from their ideal)
# estimated seconds spent on the per-key and per-rank replays (the scenarios themselves are always
# replayed): a replay costs a few numpy calls per level (a rank's calls in a row) and a little per op
REPLAY_BUDGET_S = 4.0
S_PER_LEVEL, S_PER_OP = 3e-5, 2e-8
# a rank with more calls than this is not replayed at all (its levels would take minutes)
MAX_CALLS_PER_RANK = 20_000

# a scenario's replay arguments: durations, delays, and how a collective ends ("max": at its last
# rank's arrival; per group, True: at its first rank's)
Scenario = tuple[np.ndarray, np.ndarray, "str | np.ndarray"]

NOTES = [
    "Replay model: each rank runs its operations in the order measured; an operation starts when "
    "its predecessors have ended plus the time between them that the trace does not explain "
    "(kept as measured); a collective (or a send with its receive) ends for all its ranks its "
    "transfer time after its last rank arrived; the transfer time is the measured end minus the "
    "last arrival.",
    "no_straggler: every collective starts when its first rank arrives; the late ranks' delay is "
    "removed and the gain propagates along every rank's timeline. A receive still waits for its "
    "send (a message cannot arrive before it is sent); a send that returned before its receive was "
    "posted (buffered) waits for nobody, here as measured.",
    "full_overlap: the exposed part of each collective (its time no compute kernel hides) is "
    "removed from its transfer time.",
    "reference_busbw: each collective's transfer takes bytes x busbw factor / the nccl-tests "
    "reference busbw at its size (--nccl-log); a step it would make slower than measured is withheld.",
    "ideal: every operation at the typical duration of its kind (the median over the ranks of "
    "its collective, for the time before it and its transfer) and no unexplained delays; "
    "attribution: S of a rank or op = the ideal replay with only its operations as measured, "
    "over the ideal step time.",
    "A step's time is from the end of the previous step's last operation (on any rank) to the end "
    "of its own, or of an earlier step's when that ends later; slowdown = the job's mean step time as measured / under the scenario.",
    "A step counts only where the replay with nothing changed gives back its measured time within "
    "the tolerance under reproduction; a step whose figures would break 0 <= after <= before <= "
    "the capture's length is withheld with its reason.",
]


def scenarios(m: Model, reference: pd.DataFrame | None = None) -> dict[str, Scenario]:
    """scenario -> (dur, delay, reduce) arrays, for the scenarios this job's data allow; a note
    for each one left out."""
    # a message cannot arrive before it is sent: only collectives stop waiting for their last rank
    p2p = m.extra["p2p"]
    no_wait = np.ones(max(m.graph.n_groups, 1), bool)
    no_wait[m.graph.group[p2p & (m.graph.group >= 0)]] = False
    # nor a collective that is its ranks' first: its skew is their start-up (nsyscomm.combine.setup)
    startup = m.extra.get("startup")
    if startup is not None and startup.any():
        no_wait[m.graph.group[startup & (m.graph.group >= 0)]] = False
        m.notes.append(
            "no_straggler keeps the waiting at the ranks' first collective: its skew is their start-up, "
            "no straggler's delay"
        )
    # nor a shadow collective of a rank that joined early under Join: the others are not late to
    # it, the joined rank is absent (nsyscomm/combine/joined.py)
    shadow = m.extra.get("shadow")
    if shadow is not None and shadow.any():
        no_wait[m.graph.group[shadow & (m.graph.group >= 0)]] = False
        m.notes.append(
            "no_straggler keeps the waiting in the shadow collectives of a rank that joined early under Join: "
            "its waiting there is its absence, no straggler's delay"
        )
    out: dict[str, Scenario] = {"no_straggler": (m.dur, m.delay, no_wait)}
    arrival = m.extra.get("arrival")
    if arrival is not None:
        # a host-timed job: each rank reaches a collective after the least time any of its ranks
        # spent before it since their previous host event; what a rank did before (its compute,
        # its own calls) stands, so no step falls below its ranks' own work
        sel = arrival >= 0
        sel[sel] = no_wait[arrival[sel]]
        delay = m.delay.copy()
        delay[sel] = pd.Series(m.delay[sel]).groupby(arrival[sel]).transform("min").to_numpy()
        out["no_straggler"] = (m.dur, delay, "max")
        m.notes.append(
            "a job timed on the host (gloo, MPI) is replayed as its ranks' host events (issue, wait) and its "
            "calls' executions: no_straggler lets each rank reach a collective after the least time any of its "
            "ranks spent before it since their previous host event, and keeps the rest of each rank's own work "
            "(compute, an asynchronous call's time from its issue to its wait, its own calls before)"
        )
    if "comm" in m.extra:  # a per-op trace times each communication op on its own stream: all exposed
        out["full_overlap"] = (np.where(m.extra["comm"], 0.0, m.dur), m.delay, "max")
        out["no_launch_delay"] = (m.dur, np.zeros_like(m.delay), "max")
    else:
        exposed = m.extra["exposed_ms"]
        if np.isfinite(exposed).any():
            hide = np.minimum(m.dur, np.nan_to_num(exposed, nan=0.0))
            out["full_overlap"] = (m.dur - hide, m.delay, "max")
        else:
            m.notes.append("full_overlap: not computed, the job has no GPU kernel timing (no exposed time)")
        ref = reference_ms(m, reference)
        if ref is not None:
            out["reference_busbw"] = (np.where(np.isfinite(ref) & (m.graph.group >= 0), ref, m.dur), m.delay, "max")
        else:
            m.notes.append("reference_busbw: not computed, no nccl-tests reference curve (--nccl-log)")
    out["ideal"] = (m.ideal_dur, m.ideal_delay, "max")
    return out


def reference_ms(m: Model, curve: pd.DataFrame | None) -> np.ndarray | None:
    """Each collective's transfer time at the reference busbw of its op and size (NaN: none)."""
    from nsyscomm import busbw as opsmod

    if curve is None or curve.empty:
        return None
    out = np.full(m.graph.n, np.nan)
    sizes = np.bincount(m.graph.group[m.graph.group >= 0], minlength=max(m.graph.n_groups, 1))
    for op in pd.unique(m.extra["op"]):
        # a size nccl-tests printed as 0.00 GB/s (below its resolution) or 0 bytes says no rate
        c = curve[(curve["op"] == op) & (curve["busbw_GBps"] > 0) & (curve["bytes"] > 0)].sort_values("bytes")
        sel = (m.extra["op"] == op) & np.isfinite(m.extra["bytes"]) & (m.extra["bytes"] > 0)
        if not len(c) or not sel.any():
            continue
        x = np.log2(c["bytes"].to_numpy(float))
        bw = np.interp(np.log2(m.extra["bytes"][sel]), x, c["busbw_GBps"].to_numpy(float))
        n = np.where(m.graph.group[sel] >= 0, sizes[np.maximum(m.graph.group[sel], 0)], 1)
        factor = np.array([opsmod.busbw_factor(op, int(k)) or 0.0 for k in n])
        out[sel] = m.extra["bytes"][sel] * factor / (bw * 1e9) * 1e3  # bytes / (GB/s) -> ms
    return out if np.isfinite(out).any() else None


def _restricted(m: Model, sc: Scenario, mask: np.ndarray) -> Scenario:
    dur, delay, reduce = sc
    d = np.where(mask, dur, m.dur)
    dl = np.where(mask, delay, m.delay)
    if not isinstance(reduce, str):  # per group: only the groups of the masked ops stop waiting
        r = np.zeros(max(m.graph.n_groups, 1), bool)
        r[m.graph.group[mask & (m.graph.group >= 0)]] = True
        return d, dl, r & reduce
    return d, dl, reduce


def _biggest(labels: np.ndarray, weight: np.ndarray, k: int) -> list:
    s = pd.Series(weight).groupby(labels).sum().sort_values(ascending=False)
    return list(s.index[:k])


def analyse(m: Model, reference: pd.DataFrame | None = None, warmup: set | None = None) -> dict:
    """{'what_if': rows, 'attribution': rows, 'reproduction': ..., 'withheld': ..., 'notes': [...]}
    (JSON-ready); warmup: the steps the job's figures leave out. Only the steps whose replay with
    nothing changed gives back their measured time count (nsyscomm.analyses.whatif_check)."""
    if warmup:
        m.set_warmup(warmup)
    before = m.run()
    reproduced, doc = whatif_check.reproduction(m, before)
    base = (np.ones(len(m.steps), bool) if m.steady is None else m.steady) & reproduced
    withheld: dict = {}
    if not reproduced.all():
        m.notes.append(
            f"what-if withheld for {int((~reproduced).sum())} of {len(reproduced)} step(s): the replay with "
            "nothing changed does not reproduce their measured time (whatif.reproduction)"
        )
    if not base.any():
        withheld["all"] = whatif_check.NOT_REPRODUCED if not reproduced.any() else "no step left to count"
        return {"what_if": [], "attribution": [], "reproduction": doc, "withheld": withheld, "notes": NOTES + m.notes}
    m.steady = base
    rows = []
    todo = scenarios(m, reference)
    allowed = int(REPLAY_BUDGET_S / (S_PER_LEVEL * m.graph.levels + S_PER_OP * m.graph.n + 1e-9))
    n_keys = min(MAX_KEYS, allowed // (2 * len(todo)))
    if n_keys < MAX_KEYS:
        m.notes.append(f"large job: top keys replayed for the {n_keys} largest (op, bytes, caller) only")
    keys = _biggest(m.key, m.dur + np.maximum(m.delay, 0), n_keys)
    for name, sc in todo.items():
        after = m.run(*sc)
        floor = whatif_check.own_work(m, sc[0], sc[1])
        keep, reasons = whatif_check.per_step(m, before, after, reproduced, floor)
        keep &= base
        if not keep.any():
            withheld[name] = next((r for r in reasons if r), "no step left to count")
            continue
        per_key: list[dict] = []
        for k in keys:
            part = m.run(*_restricted(m, sc, m.key == k))
            saved = float(np.sum((before - part)[keep]))
            if saved >= 0:  # a key whose change alone moves time into the counted steps is no saving
                per_key.append({"key": str(k), "saved_ms": saved})
        per_key.sort(key=lambda r: -r["saved_ms"])
        row = _row(m, name, before, after, keep, reasons, reproduced) | {"top_keys": per_key[:TOP_KEYS]}
        whatif_check.assert_row(row, m.capture_ms)
        rows.append(row)
    rows.sort(key=lambda r: -r["saved_ms"])
    out = {"what_if": rows, "attribution": attribution(m, max(allowed // 2, 0)), "reproduction": doc}
    return out | {"withheld": withheld, "notes": NOTES + m.notes}


def _row(
    m: Model, name: str, before: np.ndarray, after: np.ndarray, keep: np.ndarray, reasons: list, reproduced: np.ndarray
) -> dict:
    # a scenario that changes nothing in a step (a shadow step of a rank that joined under Join)
    # replays it to the same time but for the float noise of the sums: no saving, not a negative one
    after = np.where((after > before) & (after - before <= whatif_check.EPS_MS), before, after)
    mb, ma = float(np.mean(before[keep])), float(np.mean(after[keep]))
    warm = np.zeros(len(m.steps), bool) if m.steady is None else ~m.steady & reproduced
    steps = []
    for i, s in enumerate(m.steps):
        why = reasons[i] or (None if reproduced[i] else whatif_check.NOT_REPRODUCED)
        if why is not None:
            steps.append({"step": s, "withheld": why})
            continue
        b, a = float(before[i]), float(after[i])
        steps.append(
            {"step": s, "step_ms_before": b, "step_ms_after": a, "saved_ms": b - a}
            | ({"warmup": True} if warm[i] else {})
        )
    return {
        "scenario": name,
        "saved_ms": mb - ma,
        "step_ms_before": mb,
        "step_ms_after": ma,
        "slowdown": mb / ma if ma > 0 else None,
        "total_saved_ms": float(np.sum((before - after)[keep])),
        "steps": steps,
        "warmup_steps": [s for s, w in zip(m.steps, warm) if w],
    }


def attribution(m: Model, budget: int = MAX_RANKS + MAX_KEYS) -> list[dict]:
    """S of each rank / op / (DP rank, stage, op type): the ideal replay with only its operations
    as measured, over the ideal step time (1.0: it costs nothing)."""
    ideal = float(np.mean(m.kept(m.run(m.ideal_dur, m.ideal_delay))))
    if ideal <= 0:
        return []
    out = []
    # only what is slower than typical slows the others: an operation faster than its ideal is
    # put back at the ideal, so that S >= 1 (the replay never ends sooner for a longer operation)
    slow_dur, slow_delay = np.maximum(m.dur, m.ideal_dur), np.maximum(m.delay, m.ideal_delay)
    excess = (slow_dur - m.ideal_dur) + (slow_delay - m.ideal_delay)
    for by, lab in m.labels.items():
        limit = min(MAX_RANKS if by == "rank" else MAX_KEYS, max(budget // len(m.labels), 0))
        if by == "rank" and limit < len(np.unique(lab)):
            m.notes.append(f"attribution: the {limit} ranks furthest from their ideal durations only")
        for k in _biggest(lab, excess, limit):
            mask = lab == k
            delay = np.where(mask, slow_delay, m.ideal_delay) if m.attribute_delays else m.ideal_delay
            st = m.run(np.where(mask, slow_dur, m.ideal_dur), delay)
            out.append(
                {"by": by, "key": k.item() if hasattr(k, "item") else k, "slowdown": float(np.mean(m.kept(st))) / ideal}
            )
    out.sort(key=lambda r: (r["by"], -r["slowdown"]))
    return out
