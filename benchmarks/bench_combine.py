"""The stages after extraction: `nsyscomm summarize` of one report with its extract cache warm
(combining the extract into the job's tables, the analyses and the JSON view), against the SQLite
scan floor and, with --baseline, against another checkout's run side by side.

    python benchmarks/bench_combine.py REPORT.sqlite [--runs 5] [--baseline DIR] [--memory-limit 500MB]

Each checkout fills a cache of its own first (the cache key holds a hash of the code and SQL).
Then each round measures the floor, this checkout's run and the baseline's (which goes first
alternates), each in a fresh process with .pyc files; it prints medians, the per-round ratio of
this checkout to the baseline (a pair taken seconds apart shares the shared VM's phase), peak
RSS and the load average. The extraction itself is benchmarks/bench_summarize.py's.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
import tempfile

import baseline  # benchmarks/baseline.py, beside this script
from bench_summarize import floor_s, run, warm

import nsyscomm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory-limit", help="passed to summarize: DuckDB's memory per process (it spills past it)")
    ap.add_argument("--baseline", help="another checkout of nsyscomm (its C extensions built in place)")
    a = ap.parse_args(argv)
    report = os.path.abspath(a.report)
    extra = ("--memory-limit", a.memory_limit) if a.memory_limit else ()
    env = dict(os.environ, NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-bench-cache-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: with .pyc files (bench_summarize.py)
    compileall.compile_dir(os.path.dirname(nsyscomm.__file__), quiet=1)
    arms = {"this": env}
    if a.baseline:
        compileall.compile_dir(os.path.join(a.baseline, "nsyscomm"), quiet=1)
        arms["baseline"] = dict(
            env,
            PYTHONPATH=os.path.abspath(a.baseline),
            NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-bench-cache-"),
        )
        baseline.check(a.baseline, arms["baseline"])  # its own code and SQL, not this checkout's
    for arm_env in arms.values():
        run(report, *extra, env=arm_env)  # fill its cache
    floors: list[float] = []
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in arms}
    loads = []
    for i in range(a.runs):
        warm(report)
        floors.append(floor_s(report)[0])
        for name in baseline.in_turn(i, arms):
            got[name].append(run(report, *extra, env=arms[name]))
        loads.append(os.getloadavg()[0])
    size = os.path.getsize(report) / 1e6
    print(
        f"report {report} ({size:.0f} MB), {a.runs} rounds, load average {min(loads):.1f}-{max(loads):.1f}, "
        f"{os.cpu_count()} cores" + (f", --memory-limit {a.memory_limit}" if a.memory_limit else "")
    )
    print(f"floor (SQLite scan of the used columns): median {statistics.median(floors):.2f} s")
    for name, rows in got.items():
        walls = [w for w, _, _ in rows]
        rss = [r for _, r, _ in rows]
        print(
            f"{name}: cache warm, median {statistics.median(walls):.2f} s (best {min(walls):.2f} s), "
            f"{statistics.median(walls) / statistics.median(floors):.2f}x the floor; "
            f"CPU median {statistics.median(c for _, _, c in rows):.2f} s; peak RSS {min(rss):.0f}-{max(rss):.0f} MB"
        )
    if a.baseline:
        ratios = sorted(t[0] / b[0] for t, b in zip(got["this"], got["baseline"]))
        print(f"this / baseline per round: median {statistics.median(ratios):.2f}x, {ratios[0]:.2f}x-{ratios[-1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
