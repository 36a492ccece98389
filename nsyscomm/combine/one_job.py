"""Whether a job's reports can be one job, before they are combined into one: reports of two jobs
merged would renumber ranks and then match unrelated collectives (a false desync). The rule asks
only what one job cannot differ in, so that one report per node or per rank (disjoint ranks,
other hosts, sessions started apart) stays one job:

- a rank is one process: two reports whose wrapper markers claim the same rank are two jobs;
- the world is one size: the markers of all reports declare the same world size, and the job's
  processes do not outnumber it;
- the processes run at the same time: each report's processes live in a span of wall-clock time
  (its session start plus its processes' spans); two spans far apart are two jobs.

Each test needs what the reports recorded (markers, session start) and is skipped where they did
not record it. `load(merge=True)` (`--merge`) reads the reports as one job all the same."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

import pandas as pd

from nsyscomm.errors import InputError
from nsyscomm.ingest.extract_type import Extract

# processes of one job run at the same time; sessions of one job's nodes start within the
# launcher's spread, which is seconds: a gap of a minute between two reports' spans is two runs
APART_NS = 60 * 10**9


def differences(extracts: Sequence[Extract], called_pids: dict[str, set[int]]) -> list[str]:
    """What makes the reports more than one job, in words; empty when they can be one."""
    if len(extracts) < 2:
        return []
    out: list[str] = []
    claims: dict[int, list[str]] = {}  # rank -> the reports whose markers claim it
    worlds: dict[int, list[str]] = {}  # declared world size -> its reports
    processes = 0
    for e in extracts:
        m = e.markers
        marked = m[m["rank"].notna()] if len(m) else m
        for rank in sorted({int(r) for r in marked["rank"]}) if len(marked) else []:
            claims.setdefault(rank, []).append(e.report)
        if len(marked) and "world" in marked:
            for w in sorted({int(w) for w in marked["world"] if pd.notna(w)}):
                worlds.setdefault(w, []).append(e.report)
        processes += len(called_pids.get(e.report, set()) | ({int(p) for p in marked["pid"]} if len(marked) else set()))
    shared = {r: reps for r, reps in claims.items() if len(reps) > 1}
    if shared:
        pairs: dict[tuple[str, ...], list[int]] = {}
        for r, reps in shared.items():
            pairs.setdefault(tuple(reps), []).append(r)
        out += [f"rank(s) {_ranges(rs)} claimed in each of {' and '.join(reps)}" for reps, rs in pairs.items()]
    if len(worlds) > 1:
        out.append(
            "world sizes differ ("
            + ", ".join(f"{w} in {' and '.join(reps)}" for w, reps in sorted(worlds.items()))
            + ")"
        )
    elif len(worlds) == 1:
        (w,) = worlds
        if processes > w:
            out.append(f"{processes} processes made calls, but the world size is {w}")
    out += _apart(extracts)
    return out


def check(extracts: Sequence[Extract], called_pids: dict[str, set[int]]) -> None:
    """Refuse (InputError, exit status 2) reports that cannot be one job, naming what differs."""
    diff = differences(extracts, called_pids)
    if diff:
        raise InputError(
            f"these {len(extracts)} reports are not one job: {'; '.join(diff)}; summarize each job on "
            f"its own, or pass --merge to read them as one job anyway"
        )


def _apart(extracts: Sequence[Extract]) -> list[str]:
    """Reports whose wall-clock spans lie more than APART_NS apart."""
    spans = []
    for e in extracts:
        s = e.spans
        if e.session_start_utc_ns is None or s is None or not len(s):
            continue
        spans.append(
            (
                e.session_start_utc_ns + int(s["first_ns"].min()),
                e.session_start_utc_ns + int(s["last_ns"].max()),
                e.report,
            )
        )
    spans.sort()
    out = []
    end, last = None, None
    for a, b, report in spans:
        if end is not None and a - end > APART_NS:
            out.append(f"{last} ended at {_utc(end)} and {report} began at {_utc(a)}")
        if end is None or b > end:
            end, last = b, report
    return out


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 7] -> '0-3, 7'."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)
