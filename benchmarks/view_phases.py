"""Where the summary's view spends its time once the job is combined: each analysis the view asks
for (wall and CPU, its own time apart from the analyses it calls), then the job database's
queries one by one, and optionally a query of sql/ against another text of it.

    python benchmarks/view_phases.py REPORT.sqlite [--format json|text] [--runs 3]
    python benchmarks/view_phases.py REPORT.sqlite --compare late_arrivals OTHER.sql [--runs 9]

Each run loads the report with the extract cache (the extraction is not timed: see
bench_summarize.py), waits for the overlap parts begun by the combine, then prints the view to
nowhere. The analyses are timed by wrapping a fixed list of the Result's members and functions
(as summarize_timeline.py does), on the main thread only: a query begun ahead on a cursor
(Result.prefetch) shows as the time the view waited for it. With --compare, the two texts run
alternately in one process on one job database, after a check that they give the same rows.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import io
import os
import statistics
import sys
import threading
import time

import baseline  # benchmarks/baseline.py, beside this script

import nsyscomm
from nsyscomm import duck
from nsyscomm.analyses import contract, invariants, result
from nsyscomm.analyses.late import NOISE_NS
from nsyscomm.commands.summarize import emit

# the Result's members and the contract's functions a view asks for
MEMBERS = [
    "_late_raw",
    "late_ranks",
    "_dimensions_raw",
    "hang",
    "_query",
    "_check",
    "skew",
    "overlap",
    "step_rows",
    "steady_ranks",
    "_what_if_raw",
    "late_by_rank",
    "setup",
    "warmup",
    "startup",
    "joined",
]
FUNCTIONS = [
    (contract, "records"),
    (contract, "diagnosis_section"),
    (contract, "set_aside_section"),
    (contract, "steady_exposed"),
    (invariants, "enforce"),
]
QUERIES = {  # the view's queries on the job database -> their parameters
    "late_arrivals": {"noise_ns": NOISE_NS},
    "dimensions": None,
    "steady_ranks": {"warmup": ""},
    "ranks": None,
    "steps": None,
    "skew": None,
    "summary": {"by_caller": False},
    "size_histogram": None,
    "caused_wait": None,
    "rank_ops": None,
    "top_skew": {"limit": 10},
}

wall: collections.Counter = collections.Counter()
own: collections.Counter = collections.Counter()
cpu: collections.Counter = collections.Counter()
_stack: list[list[float]] = []


def _timed(label: str, fn, *args, **kwargs):
    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    t, c = time.perf_counter(), time.thread_time()
    _stack.append([0.0])
    try:
        return fn(*args, **kwargs)
    finally:
        d = time.perf_counter() - t
        children = _stack.pop()[0]
        wall[label] += d
        own[label] += d - children
        cpu[label] += time.thread_time() - c
        if _stack:
            _stack[-1][0] += d


def _wrap_members() -> None:
    for name in MEMBERS:
        member = getattr(result.Result, name, None)
        if isinstance(member, functools.cached_property):
            fn = member.func
            new = functools.cached_property(functools.partial(lambda f, n, self: _timed(n, f, self), fn, name))
            new.__set_name__(result.Result, name)
            setattr(result.Result, name, new)
        elif isinstance(member, property):
            setattr(
                result.Result,
                name,
                property(functools.partial(lambda f, n, self: _timed(n, f, self), member.fget, name)),
            )
        elif callable(member):
            setattr(
                result.Result,
                name,
                functools.partialmethod(lambda self, *a, f=member, n=name, **k: _timed(n, f, self, *a, **k)),
            )
        else:
            print(f"# Result.{name} not found: not timed", file=sys.stderr)
    for mod, name in FUNCTIONS:
        fn = getattr(mod, name)
        setattr(
            mod, name, functools.wraps(fn)(functools.partial(_timed, f"{mod.__name__.rsplit('.', 1)[-1]}.{name}", fn))
        )


def _load(report: str) -> result.Result:
    r = nsyscomm.load(report)
    if r.overlap_parts is not None:
        r.overlap_parts.result()
    return r


def phases(report: str, fmt: str, runs: int) -> None:
    _wrap_members()
    totals = []
    for _ in range(runs):
        r = _load(report)
        wall.clear(), own.clear(), cpu.clear()
        t, c = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            emit(r, fmt, "GBps", False)
        totals.append((time.perf_counter() - t, time.process_time() - c, os.getloadavg()[0]))
    print(f"{report}, --format {fmt}: the view after the combine, {runs} runs")
    for w, c, load in totals:
        print(f"  wall {w:.3f} s, CPU (all threads) {c:.3f} s, load average {load:.1f}")
    print("the last run, per analysis (main thread; own: apart from the analyses it calls; CPU: of the main thread):")
    for label in sorted(wall, key=lambda k: -own[k]):
        if wall[label] >= 0.002:
            print(f"  {label:28} own {own[label]:.3f} s  with its callees {wall[label]:.3f} s  CPU {cpu[label]:.3f} s")
    con = _load(report).con
    print("the view's queries alone on the job database (best of 3, wall / CPU of the process):")
    for name, params in QUERIES.items():
        best = min(_run(con, duck.sql(name), params) for _ in range(3))
        print(f"  {name:16} {best[0]:.3f} s / {best[1]:.3f} s")


def _run(con, sql: str, params) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    con.execute(sql, params).fetchall()
    return time.perf_counter() - t, time.process_time() - c


def compare(report: str, name: str, other: str, runs: int) -> None:
    con = _load(report).con
    params = QUERIES.get(name)
    texts = {"sql/": duck.sql(name), other: open(other).read()}
    rows = [con.execute(text, params).fetchall() for text in texts.values()]
    print(f"{name}: the same rows: {rows[0] == rows[1]} ({len(rows[0])} and {len(rows[1])})")
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in texts}
    for i in range(runs):
        for key in baseline.in_turn(i, texts):
            got[key].append(_run(con, texts[key], params))
    for key, times in got.items():
        print(
            f"  {key}: wall median {statistics.median(w for w, _ in times):.3f} s, "
            f"CPU median {statistics.median(c for _, c in times):.3f} s"
        )
    print(f"  load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--format", default="json", choices=["text", "json"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", nargs=2, metavar=("QUERY", "FILE"), help="a query of sql/ and another text of it")
    a = ap.parse_args(argv)
    if a.compare:
        compare(a.report, a.compare[0], a.compare[1], a.runs)
    else:
        phases(a.report, a.format, a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
