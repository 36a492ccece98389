"""Peak memory of `nsyscomm summarize` on a report and on the same job N times longer, side by side.

    python benchmarks/bench_memory.py SMALL.sqlite LARGE.sqlite [--runs 2] [--memory-limit 500MB] [--baseline DIR]

The reports are made with benchmarks/gen_large_report.py: SMALL with its defaults (10 steps),
LARGE with --steps 40 (the same job 4x longer: 4x the kernels, ranges and calls). Each run is a
fresh `summarize --no-cache --format json` process; its peak RSS is the most resident memory of
that process and the processes it waited for (wait4), the figure `/usr/bin/time -f %M` gives.
The runs alternate SMALL, LARGE (and the baseline's, with --baseline: another checkout, its C
extensions built in place), so the ratio LARGE / SMALL compares runs of the same minutes. Prints
each report's peaks, the ratio of the medians, and whether the JSON of each report is the same
in every run and (with --baseline) the same as the baseline's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

import baseline  # benchmarks/baseline.py, beside this script


def run(report: str, limit: tuple[str, ...], env: dict) -> tuple[float, float, str]:
    """One summarize: (peak RSS MB, wall s, digest of its JSON)."""
    cmd = [sys.executable, "-m", "nsyscomm", "summarize", report, "--format", "json", "--no-cache", *limit]
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=baseline.RUN_DIR)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        err = p.stderr.read().decode(errors="replace") if p.stderr else ""
        if p.stderr:
            p.stderr.close()
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"summarize {report} failed: {err.strip()[-400:]}")
        out.seek(0)
        digest = hashlib.sha256(out.read()).hexdigest()[:12]
    return usage.ru_maxrss / 1024, wall, digest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("small")
    ap.add_argument("large")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--memory-limit", help="passed to summarize (DuckDB's memory per process; it spills past it)")
    ap.add_argument("--baseline", help="another checkout: its runs alternate with this one's")
    a = ap.parse_args(argv)
    reports = [os.path.abspath(a.small), os.path.abspath(a.large)]
    limit = ("--memory-limit", a.memory_limit) if a.memory_limit else ()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"this tree": env}
    if a.baseline:
        base_env = dict(env, PYTHONPATH=os.path.abspath(a.baseline))
        baseline.check(a.baseline, base_env)  # its own code and SQL, not this checkout's
        trees[f"baseline {a.baseline}"] = base_env
    peaks: dict[tuple[str, str], list[float]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    digests: dict[str, set[str]] = {r: set() for r in reports}
    for _ in range(a.runs):
        for tree, e in trees.items():
            for r in reports:
                rss, wall, digest = run(r, limit, e)
                peaks.setdefault((tree, r), []).append(rss)
                walls.setdefault((tree, r), []).append(wall)
                digests[r].add(digest)
    print(
        f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores"
        + (f", --memory-limit {a.memory_limit}" if a.memory_limit else "")
    )
    for tree in trees:
        med = {}
        for r in reports:
            p = peaks[(tree, r)]
            med[r] = statistics.median(p)
            size = os.path.getsize(r) / 1e6
            print(
                f"{tree}: {os.path.basename(r)} ({size:.0f} MB): peak RSS {', '.join(f'{x:.0f}' for x in p)} MB; "
                f"wall median {statistics.median(walls[(tree, r)]):.2f} s"
            )
        print(f"{tree}: peak RSS large / small {med[reports[1]] / med[reports[0]]:.2f}x (medians)")
    for r in reports:
        print(
            f"{os.path.basename(r)}: JSON {'the same in every run' if len(digests[r]) == 1 else 'DIFFERS between runs'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
