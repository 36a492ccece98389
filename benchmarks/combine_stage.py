"""The combine stage alone: `combine` (the job's tables from the extracts) and, inside it,
`create_collectives` (sql/call_spans.sql's windows and sql/collectives.sql's join), wall and CPU
of the whole process while each runs, of one report loaded with its extract cache warm; with
--baseline, another checkout's in the same run, alternated, each in a process of its own.

    python benchmarks/combine_stage.py REPORT.sqlite [--runs 5] [--loads 3] [--baseline DIR]

Each process loads the report --loads times (the first fills or reads its checkout's cache) and
prints the collectives table's digest, which both checkouts must share. The CPU is the process's
(DuckDB's threads, and the copies and the overlap pass that combine begins on threads of its own,
count); a loaded machine stretches the wall far more than the CPU. Medians over every load of
every run; bench_combine.py times the stages after extraction whole.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import baseline  # benchmarks/baseline.py, beside this script

# one process: load the report `loads` times, timing the two functions, and print a JSON line
CHILD = """
import json, sys, time
import nsyscomm.combine.job as job
from nsyscomm import api
got = {"combine": [], "create_collectives": []}
def timed(f, key):
    def run(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return f(*a, **k)
        finally:
            got[key].append((time.perf_counter() - t0, time.process_time() - c0))
    return run
api.combine = timed(api.combine, "combine")
job.create_collectives = timed(job.create_collectives, "create_collectives")
digest = None
for i in range(int(sys.argv[2])):
    r = api.load(sys.argv[1])
    digest = digest or str(r.con.execute("SELECT count(*), sum(hash(c)) FROM collectives c").fetchone())
    r.con.close()
print(json.dumps({"digest": digest, **{k: v[1:] or v for k, v in got.items()}}))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loads", type=int, default=3, help="loads per process (the first is not counted)")
    ap.add_argument("--baseline", help="another checkout of nsyscomm (its C extensions built in place)")
    a = ap.parse_args(argv)
    report = os.path.abspath(a.report)
    env = dict(os.environ, NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-bench-cache-"))
    arms = {"this": env}
    if a.baseline:
        arms["baseline"] = dict(
            env,
            PYTHONPATH=os.path.abspath(a.baseline),
            NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-bench-cache-"),
        )
        baseline.check(a.baseline, arms["baseline"])  # its own code and SQL, not this checkout's
    got: dict[str, dict[str, list]] = {k: {"combine": [], "create_collectives": []} for k in arms}
    digests: dict[str, set] = {k: set() for k in arms}
    loads = []
    for i in range(a.runs):
        for name in baseline.in_turn(i, arms):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, report, str(a.loads)],
                capture_output=True,
                text=True,
                env=arms[name],
                cwd=baseline.RUN_DIR,
            )
            if out.returncode:
                raise SystemExit(f"{name}: {out.stderr.strip()[-500:]}")
            line = json.loads(out.stdout.strip().splitlines()[-1])
            digests[name].add(line.pop("digest"))
            for k, v in line.items():
                got[name][k] += v
        loads.append(os.getloadavg()[0])
    for name, stages in got.items():
        for stage, v in stages.items():
            wall = statistics.median(w for w, _ in v)
            cpu = statistics.median(c for _, c in v)
            print(f"{name:8s} {stage:20s} wall {wall:.3f} s (best {min(w for w, _ in v):.3f})  CPU {cpu:.3f} s")
    if a.baseline:
        for stage in ("combine", "create_collectives"):
            for i, what in ((0, "wall"), (1, "CPU")):
                this = statistics.median(x[i] for x in got["this"][stage])
                base = statistics.median(x[i] for x in got["baseline"][stage])
                print(f"{stage} {what}: x{this / base:.2f} the baseline's")
    same = len(set().union(*digests.values())) == 1
    print(f"collectives digest {'the same' if same else 'DIFFERS'}: {sorted(set().union(*digests.values()))}")
    print(f"load average {min(loads):.1f}-{max(loads):.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
