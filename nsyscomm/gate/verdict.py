"""The comparison of a current run against baseline runs, item by item, and the verdict."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from nsyscomm.errors import InputError
from nsyscomm.gate.hang import hang_failure
from nsyscomm.gate.metrics import METRICS, Key, Metric, _int, _num, per_rank
from nsyscomm.gate.outcome import (
    FEW_CALLS,
    IMPROVEMENT,
    MISSING,
    NEW,
    NOISE,
    OK,
    REGRESSION,
    SKIPPED,
    WARN,
    Comparison,
    Item,
    Verdict,
)
from nsyscomm.gate.runs import Run, load_run, load_runs, without_line
from nsyscomm.gate.settings import Settings, Threshold
from nsyscomm.gate.single_run import SingleRun, host_timed, noisy_row, single_run_margin, single_run_note

# re-exported: the names nsyscomm.gate.verdict has always offered
__all__ = [
    "FEW_CALLS",
    "IMPROVEMENT",
    "MISSING",
    "NEW",
    "NOISE",
    "OK",
    "REGRESSION",
    "SKIPPED",
    "WARN",
    "Comparison",
    "Item",
    "Verdict",
    "compare",
    "compare_values",
    "run_gate",
]

# The one timing of a host-timed or noisy key that the host's load barely moves: its fastest
# call. Load only adds time to a call, and a few runs' spread is no bound on how much, while a
# slowdown inside every call moves the fastest one too (docs/gate.md, "Noise bands").
LOAD_ROBUST = {"min_ms"}


def compare_values(
    metric: Metric,
    thr: Threshold,
    base: list[float],
    cur: float | None,
    noise_sigma: float = 0.0,
    single: SingleRun | None = None,
) -> Comparison:
    """One metric of one item: baseline values (one per run that has it) against the current value.
    `single` is given for a host-timed or call-to-call noisy value: with one baseline value there
    is no band, and it widens the threshold; with several, the runs' spread seen is no bound on
    the scheduler's noise, and the band is widened by its own width on either side; the timings
    that load inflates keep the widened threshold too, and the fastest call (LOAD_ROBUST) its
    factor alone."""
    given = thr
    if single is not None and len(base) > 1 and metric.name in LOAD_ROBUST:
        thr = single.factor_only(metric, thr)
    elif single is not None:
        thr = single.threshold(metric, thr)

    def comp(status, reason="", **kw):
        return Comparison(
            metric.id,
            metric.label,
            metric.unit,
            metric.better,
            kw.get("ref"),
            kw.get("band"),
            len(base),
            cur,
            kw.get("delta"),
            kw.get("rel"),
            thr,
            status,
            reason,
            thr != given,
        )

    if not base or cur is None:
        return comp(
            SKIPPED,
            "not in the current run" if base else "not in the baseline",
            ref=statistics.median(base) if base else None,
        )
    ref = statistics.median(base)
    spread = statistics.stdev(base) if len(base) > 1 else 0.0
    lo, hi = min(base) - noise_sigma * spread, max(base) + noise_sigma * spread
    if single is not None and len(base) > 1:  # one more of the runs' own spread beyond their worst
        lo, hi = lo - (max(base) - min(base)), hi + (max(base) - min(base))
    delta = cur - ref
    rel = (delta / abs(ref) * 100.0) if ref else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    kw = {"ref": ref, "band": (lo, hi) if len(base) > 1 else None, "delta": delta, "rel": rel}
    if not thr.enabled:
        return comp(SKIPPED, "metric disabled", **kw)
    exceeds = abs(delta) > thr.abs and abs(rel) > thr.rel
    if not exceeds:
        return comp(OK, **kw)
    worse = delta < 0 if metric.better == "higher" else delta > 0
    if not worse:
        return comp(IMPROVEMENT, **kw)
    outside = cur < lo if metric.better == "higher" else cur > hi
    if not outside:
        return comp(NOISE, f"inside the baseline runs' band [{lo:.4g}, {hi:.4g}]", **kw)
    if not thr.fail:
        return comp(WARN, "reported only (fail = false)", **kw)
    # what it exceeded is the comparison's margin (Comparison.margin, shown beside it)
    why = "outside the baseline runs' band" if len(base) > 1 else "one baseline run: no noise band"
    return comp(REGRESSION, why, **kw)


def _level(baselines: list[Run], current: Run, want: str) -> tuple[str, list[str]]:
    have = all(r.caller_rows is not None for r in [*baselines, current])
    if want == "caller" and not have:
        lacking = [r.source for r in [*baselines, current] if r.caller_rows is None]
        return "op", [f"compared per op, not per caller: no caller information in {', '.join(lacking[:3])}"]
    if want == "op":
        return "op", []
    return ("caller" if have else "op"), []


def _policy_status(item: Item, policy: str, status: str, gated: bool) -> None:
    item.status = status
    item.fails = policy == "fail" and gated
    if not gated:
        item.note = f"fewer calls than min_calls; {status} key not gated"
    elif policy != "fail":
        item.note = f"{status} key ({policy}: reported only)"


def compare(baselines: list[Run], current: Run, settings: Settings | None = None) -> Verdict:
    """Compare the current run against the baseline runs: one Item per key, rank and the job."""
    s = settings or Settings()
    _check_sides(baselines, current)
    level, notes = _level(baselines, current, s.level)
    if len(baselines) == 1:
        notes.append(single_run_note(s, baselines[0].doc))
    items = _compare_keys(baselines, current, level, s)
    rank_items = _compare_ranks(baselines, current, s)
    items += [rank_items[rank] for rank in sorted(rank_items)]
    notes += _rank_notes(baselines, current, rank_items)
    job = _compare_job(baselines, current, s)
    if job is not None:
        items.append(job)
    if current.empty and all(b.empty for b in baselines):
        notes.append("no collective calls on either side: nothing to compare")
    return Verdict(items, level, [b.source for b in baselines], current.source, s, notes, hang_failure(current))


def _check_sides(baselines: list[Run], current: Run) -> None:
    """Refuse what cannot be compared: no baseline, or a run whose capture found no call at all."""
    if not baselines:
        raise InputError("no baseline run given: pass --baseline BASELINE.json (make it with nsyscomm baseline)")
    if current.empty and any(not b.empty for b in baselines):
        raise InputError(
            f"{current.source}: no collective calls found, while the baseline has some; "
            f"the capture likely failed (profile with nsys --trace=cuda,nvtx and nsyscomm.annotate())"
        )


def _compare_keys(baselines: list[Run], current: Run, level: str, s: Settings) -> list[Item]:
    """One Item per key of either side, in (op, size, group size, caller) order."""
    base_rows = [b.rows(level, s.caller_line) for b in baselines]
    cur_rows = current.rows(level, s.caller_line)
    keys = list(dict.fromkeys([k for rows in base_rows for k in rows] + list(cur_rows)))
    keys.sort(key=lambda k: (k.op, k.bytes is None, k.bytes or 0, k.group_size or 0, k.caller or ""))
    items = [_compare_key(k, baselines, base_rows, current, cur_rows.get(k), s) for k in keys]
    return [i for i in items if i is not None]


def _compare_key(
    k: Key, baselines: list[Run], base_rows: list[dict[Key, dict]], current: Run, cur: dict | None, s: Settings
) -> Item | None:
    """One key: set aside, new, missing (None when its policy is ignore), or compared metric by metric."""
    holders = [i for i, rows in enumerate(base_rows) if k in rows]
    in_base = [base_rows[i][k] for i in holders]
    bcalls = [c for c in (_num(r.get("calls")) for r in in_base) if c is not None]
    bcall = statistics.median(bcalls) if bcalls else None
    ccall = _num(cur.get("calls")) if cur else None
    item = Item("key", k.label(), key=k, baseline_calls=bcall, current_calls=ccall)
    aside = [r.source for r in (current, *baselines) if _set_aside_in(r, k)]
    if (not in_base or cur is None) and aside:
        # one run's first call of a communicator was its setup, another's was not: the key is
        # the same calls, not a new or vanished one (docs/gate.md, "Set-aside calls")
        item.status = NEW if not in_base else MISSING
        item.note = f"set aside as communicator setup in {', '.join(aside[:2])}: not gated"
        return item
    if not in_base:
        if s.new_keys == "ignore":
            return None
        _policy_status(item, s.new_keys, NEW, (ccall or 0) >= s.min_calls)
        return item
    if cur is None:
        if s.missing_keys == "ignore":
            return None
        _policy_status(item, s.missing_keys, MISSING, (bcall or 0) >= s.min_calls)
        return item
    gated = min(bcall or 0, ccall or 0) >= s.min_calls
    first, first_doc = in_base[0], baselines[holders[0]].doc
    one = single_run_margin(s, first_doc, _num(first.get("count")) or 1.0, _num(first.get("avg_ms")))
    one = one if host_timed(first_doc) or noisy_row(first) else None
    for m in (m for m in METRICS if m.scope == "key"):
        base_vals = [v for v in (_num(r.get(m.name)) for r in in_base) if v is not None]
        cv = _num(cur.get(m.name))
        if not base_vals and cv is None:
            continue  # neither side has this metric (e.g. busbw without bytes)
        c = compare_values(m, s.thresholds[m.id], base_vals, cv, s.noise_sigma, one)
        if c.status == REGRESSION and not gated:
            c.status, c.reason = WARN, f"fewer than {s.min_calls} calls: not gated"
        item.comparisons.append(c)
    _settle(item, gated)
    return item


def _rank_calls(doc: dict) -> dict[int, float]:
    return per_rank("ranks", "calls")(doc) or {}


def _compare_ranks(baselines: list[Run], current: Run, s: Settings) -> dict[int, Item]:
    """One Item per rank that both sides have, its rank metrics compared."""
    rank_items: dict[int, Item] = {}
    rank_calls = [_rank_calls(b.doc) for b in baselines]
    for m in (m for m in METRICS if m.scope == "rank"):
        base_maps = [m.of_ranks(b.doc) for b in baselines]
        cur_map = m.of_ranks(current.doc)
        if cur_map is None or all(bm is None for bm in base_maps):
            continue  # the section is not on both sides: nothing to compare
        in_base: set[int] = set().union(*(bm or {} for bm in base_maps))
        for rank in sorted(set(cur_map) & in_base):
            have = [(i, bm[rank]) for i, bm in enumerate(base_maps) if bm and rank in bm]
            vals = [v for _, v in have]
            first = have[0][0]
            one = single_run_margin(s, baselines[first].doc, rank_calls[first].get(rank, 1.0), noisy=True)
            it = rank_items.setdefault(rank, Item("rank", f"rank {rank}", rank=rank))
            it.comparisons.append(compare_values(m, s.thresholds[m.id], vals, cur_map[rank], s.noise_sigma, one))
    for it in rank_items.values():
        _settle(it, True)
    return rank_items


def _rank_notes(baselines: list[Run], current: Run, rank_items: dict[int, Item]) -> list[str]:
    """Notes on the ranks: a changed set of ranks, a changed straggler."""
    notes = []
    base_ranks: set[int] = set().union(*(set(_rank_calls(b.doc)) for b in baselines))
    cur_ranks = set(_rank_calls(current.doc))
    if base_ranks and cur_ranks and base_ranks != cur_ranks:
        notes.append(f"ranks differ: baseline {_ranges(base_ranks)}, current {_ranges(cur_ranks)}")
    bs = {(b.doc.get("skew") or {}).get("straggler_rank") for b in baselines} - {None}
    cs = (current.doc.get("skew") or {}).get("straggler_rank")
    # which rank comes last most often flips between runs of a balanced job: news only when the
    # arrival delays moved beyond their margin
    moved = any(
        c.metric == "rank.arrival_delay_ms" and c.status in (REGRESSION, WARN, NOISE)
        for it in rank_items.values()
        for c in it.comparisons
    )
    if cs is not None and bs and cs not in bs and moved:
        notes.append(
            f"straggler changed: rank {cs} now keeps the others waiting longest (baseline: rank(s) {_ranges(bs)})"
        )
    return notes


def _compare_job(baselines: list[Run], current: Run, s: Settings) -> Item | None:
    """The job totals' Item (None when no job metric is on both sides)."""
    job = Item("job", "job totals")
    for m in (m for m in METRICS if m.scope == "job"):
        have = [(b, v) for b, v in ((b, m.of_job(b.doc)) for b in baselines) if v is not None]
        base_vals = [v for _, v in have]
        cv = m.of_job(current.doc)
        if base_vals and cv is not None:
            calls = max((_rank_calls(have[0][0].doc) or {1: 1.0}).values())
            one = single_run_margin(s, have[0][0].doc, calls, noisy=True)
            job.comparisons.append(compare_values(m, s.thresholds[m.id], base_vals, cv, s.noise_sigma, one))
    if not job.comparisons:
        return None
    _settle(job, True)
    return job


def _set_aside_in(run: Run, key: Key) -> bool:
    """Whether the run set aside calls of this key as their communicator's setup (its `setup` rows)."""
    rows = (run.doc.get("setup") or {}).get("rows") if isinstance(run.doc.get("setup"), dict) else None
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict) or r.get("op") != key.op or _int(r.get("bytes")) != key.bytes:
            continue
        n = _int(r.get("participants"))
        if key.group_size is not None and n is not None and n != key.group_size:
            continue
        caller = r.get("caller") if isinstance(r.get("caller"), str) else None
        if key.caller is None or key.caller in (caller, without_line(caller)):
            return True
    return False


def _settle(item: Item, gated: bool) -> None:
    sts = {c.status for c in item.comparisons}
    item.fails = REGRESSION in sts
    if item.fails:
        item.status = REGRESSION
    elif not gated:
        item.status = FEW_CALLS
        item.note = "fewer calls than min_calls: reported, not gated"
    elif IMPROVEMENT in sts and not (sts & {WARN, NOISE}):
        item.status = IMPROVEMENT
    elif WARN in sts:
        item.status = WARN
    elif NOISE in sts:
        item.status = NOISE
    elif IMPROVEMENT in sts:
        item.status = IMPROVEMENT
    else:
        item.status = OK


def _ranges(xs) -> str:
    xs = sorted(xs)
    return f"{xs[0]}-{xs[-1]}" if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)) else ",".join(map(str, xs))


def run_gate(baseline_sources: Iterable, current_sources: Iterable, settings: Settings | None = None) -> Verdict:
    """Load both sides and compare: the library call behind ``nsyscomm gate``."""
    baselines = load_runs(baseline_sources)
    current = load_run(current_sources)
    return compare(baselines, current, settings)
