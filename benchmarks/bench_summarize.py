"""Wall time and peak RSS of `nsyscomm summarize` on one report, against the ingestion floor.

    python benchmarks/bench_summarize.py REPORT.sqlite [--runs 3] [--memory-limit 150MB] [--baseline DIR]

Floor: the time SQLite itself takes to scan the columns the ingest reads (every row of the
kernel, launch and NVTX tables, each used column decoded: sum()/length() over them, in C, no
Python objects), measured in the same run, file in the page cache. Each summarize runs in a
fresh process (`--no-cache`, then once more with the cache warm); peak RSS is that process's.
Prints best and median of the runs, the ratio of each run to the floor measured just before it,
and the load average; and the CPU time (user + system, all threads) of each against the
floor's: on C cores, the wall-time ratio cannot fall below the CPU ratio / C. The runs use
nsyscomm's .pyc files, as an installed package does (written first, even where
PYTHONDONTWRITEBYTECODE is set).
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

import baseline  # benchmarks/baseline.py, beside this script

from nsyscomm.extract.pool import usable_cores  # the cores this process may use, as summarize counts them
from nsyscomm.ingest.nsys.reader import read_only_uri

FLOOR = {
    "CUPTI_ACTIVITY_KIND_KERNEL": 'total(start), total("end"), total(deviceId), total(streamId), '
    "total(correlationId), total(globalPid), total(shortName)",
    "CUPTI_ACTIVITY_KIND_RUNTIME": 'total(start), total("end"), total(globalTid), total(correlationId)',
    "NVTX_EVENTS": 'total(start), total("end"), total(eventType), total(globalTid), total(length(text)), '
    "total(textId), total(domainId)",
    "StringIds": "total(id), total(length(value))",
}


def warm(path: str) -> None:
    """Read the file into the page cache. Some VMs page out cold memory within seconds (DAMON on
    the one this was built on: 300 MB of the report gone in 40 s), so the floor and each summarize
    start from a warm file, as the figures claim."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def floor_s(path: str) -> tuple[float, float]:
    """(wall s, CPU s) of SQLite scanning the used columns."""
    con = sqlite3.connect(read_only_uri(path), uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    t0, c0 = time.perf_counter(), _cpu(resource.RUSAGE_SELF)
    for t, cols in FLOOR.items():
        if t in tables:
            con.execute(f"SELECT count(*), {cols} FROM {t}").fetchall()
    return time.perf_counter() - t0, _cpu(resource.RUSAGE_SELF) - c0


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run(path: str, *extra: str, env=None) -> tuple[float, float, float]:
    """(wall s, peak RSS MB, CPU s) of one summarize in a child process (and its workers)."""
    # the peak as VmHWM, where Linux has it: ru_maxrss counts what the child held between fork and
    # exec, a copy of this process (4 GB after bench_many_reports generated 13M rows)
    code = (
        "import sys, resource; from nsyscomm.cli import entry\n"  # what the nsyscomm command runs
        "try:\n    entry(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "try:\n    kb = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1]\n"
        "except (OSError, IndexError):\n    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(kb, file=sys.stderr)"
    )
    t0, c0 = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN)
    p = subprocess.run(
        [sys.executable, "-c", code, "summarize", path, "--format", "json", *extra],
        stdout=subprocess.DEVNULL,  # not read here: this process would take a core's share reading it
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=baseline.RUN_DIR,  # not a checkout's folder (benchmarks/baseline.py)
    )
    wall, cpu = time.perf_counter() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0
    if p.returncode:
        raise SystemExit(p.stderr)
    rss_kb = max(
        int(p.stderr.strip().splitlines()[-1]),
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if "--jobs" in extra else 0,
    )
    return wall, rss_kb / 1024, cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--memory-limit", help="passed to summarize: DuckDB's memory per process (it spills past it)")
    ap.add_argument(
        "--baseline",
        help="another checkout of nsyscomm (its C extensions built in place): its summarize runs beside "
        "each of this one's (which goes first alternates), against the same floor",
    )
    a = ap.parse_args(argv)
    a.report = os.path.abspath(a.report)  # the runs start in another folder (run())
    limit = ("--memory-limit", a.memory_limit) if a.memory_limit else ()
    env = dict(os.environ, NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-bench-cache-"))
    env, base_env = baseline.environments(env, a.baseline)
    floor_s(a.report)  # warm the page cache
    floors, walls, rsss, floor_cpus, cpus, base_walls = [], [], [], [], [], []

    def run_baseline() -> None:
        warm(a.report)
        base_walls.append(run(a.report, "--no-cache", *limit, env=base_env)[0])

    for i in range(a.runs):
        warm(a.report)
        f, fc = floor_s(a.report)
        floors.append(f)
        floor_cpus.append(fc)
        # with a baseline, which of the two runs first alternates: the run just after the floor's
        # was measurably slower, whichever it was
        if base_env is not None and i % 2:
            run_baseline()
        warm(a.report)
        w, r, c = run(a.report, "--no-cache", *limit, env=env)
        walls.append(w)
        rsss.append(r)
        cpus.append(c)
        if base_env is not None and not i % 2:
            run_baseline()
    run(a.report, *limit, env=env)  # fill the cache
    hits = [run(a.report, *limit, env=env)[0] for _ in range(a.runs)]
    size = os.path.getsize(a.report) / 1e6
    f_best, w_best = min(floors), min(walls)
    print(
        f"report {a.report} ({size:.0f} MB), load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores"
        + (f", --memory-limit {a.memory_limit}" if a.memory_limit else "")
    )
    print(f"floor (SQLite scan of the used columns): best {f_best:.2f} s, median {statistics.median(floors):.2f} s")
    print(
        f"summarize --no-cache: best {w_best:.2f} s, median {statistics.median(walls):.2f} s; "
        f"peak RSS max {max(rsss):.0f} MB"
    )
    print(
        f"ratio to floor: best {w_best / f_best:.2f}x, median {statistics.median(walls) / statistics.median(floors):.2f}x"
    )
    # each run against the floor measured just before it: the VM's speed drifts over minutes, and
    # a pair taken seconds apart shares its phase
    paired = sorted(w / f for w, f in zip(walls, floors))
    print(
        f"ratio per run (each against the floor just before it): median {statistics.median(paired):.2f}x, "
        f"{paired[0]:.2f}x-{paired[-1]:.2f}x"
    )
    if base_walls:
        base = sorted(w / f for w, f in zip(base_walls, floors))
        print(
            f"baseline {a.baseline}: median {statistics.median(base_walls):.2f} s; ratio per run "
            f"median {statistics.median(base):.2f}x, {base[0]:.2f}x-{base[-1]:.2f}x"
        )
    cpu_ratio = statistics.median(c / f for c, f in zip(cpus, floor_cpus))
    print(
        f"CPU time: floor median {statistics.median(floor_cpus):.2f} s, summarize median "
        f"{statistics.median(cpus):.2f} s (user + system, all threads): {cpu_ratio:.2f}x the floor's per run, "
        f"so at least {cpu_ratio / usable_cores():.2f}x in wall time on {usable_cores()} cores"
    )
    print(
        f"summarize, cache hit: best {min(hits):.2f} s, median {statistics.median(hits):.2f} s "
        f"({min(hits) / w_best:.0%} of the first)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
