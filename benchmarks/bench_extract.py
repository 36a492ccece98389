"""Wall time of one nsys report's extraction after its read, against another tree's.

    python benchmarks/bench_extract.py REPORT.sqlite [--runs 5] [--baseline DIR]

Each run is a fresh process that imports what a summarize imports, then times
nsyscomm.ingest.nsys.extract.extract(REPORT): the read (open_report: the C scan, both cores) and
the rest of the extraction after it (nccl_kernels, the launches' owners, the calls, the busy
times, the kernels in each call's gap, ...), in wall time, and the process's CPU time (all
threads) over the whole extraction. With --baseline, that tree's run goes beside each of this
one's, which one first alternating (benchmarks/baseline.py), the file in the page cache before
each. Prints each run's figures, then the medians and the ratio this / baseline of the time
after the read per pair of runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import baseline  # benchmarks/baseline.py, beside this script
from bench_summarize import warm

CODE = """
import json, os, sys, time
import nsyscomm.analyses, pandas, pyarrow  # what a summarize has imported when it extracts
from nsyscomm.ingest.nsys import extract as e
marks = {}
real = e.open_report
def timed(*a, **k):
    out = real(*a, **k)
    marks["read"] = time.perf_counter()
    return out
e.open_report = timed
t0, c0 = time.perf_counter(), time.process_time()
ex = e.extract(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"read": marks["read"] - t0, "after": t1 - marks["read"], "cpu": c1 - c0,
                  "calls": ex.calls.num_rows}))
"""


def run(path: str, env: dict) -> dict:
    warm(path)
    p = subprocess.run(
        [sys.executable, "-c", CODE, path], capture_output=True, text=True, env=env, cwd=baseline.RUN_DIR
    )
    if p.returncode:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--baseline", help="another checkout of nsyscomm (its C extensions built in place)")
    a = ap.parse_args(argv)
    path = os.path.abspath(a.report)
    env, base_env = baseline.environments(dict(os.environ), a.baseline)
    mine: list[dict] = []
    base: list[dict] = []
    loads = [os.getloadavg()[0]]
    for i in range(a.runs):
        for out, e in baseline.in_turn(i, [(mine, env), (base, base_env)]):
            if e is not None:
                out.append(run(path, e))
        loads.append(os.getloadavg()[0])
        line = (
            f"run {i + 1}: read {mine[-1]['read']:.3f} s, after {mine[-1]['after']:.3f} s, CPU {mine[-1]['cpu']:.2f} s"
        )
        if base:
            line += f"; baseline read {base[-1]['read']:.3f} s, after {base[-1]['after']:.3f} s, CPU {base[-1]['cpu']:.2f} s"
        print(line, flush=True)
    med = {k: statistics.median(r[k] for r in mine) for k in ("read", "after", "cpu")}
    print(f"report {path}, {mine[0]['calls']:,} calls, load average {min(loads):.2f}-{max(loads):.2f}")
    print(f"this tree: read {med['read']:.3f} s, after the read {med['after']:.3f} s, CPU {med['cpu']:.2f} s (medians)")
    if base:
        bmed = {k: statistics.median(r[k] for r in base) for k in ("read", "after", "cpu")}
        print(
            f"baseline:  read {bmed['read']:.3f} s, after the read {bmed['after']:.3f} s, CPU {bmed['cpu']:.2f} s (medians)"
        )
        ratios = sorted(m["after"] / b["after"] for m, b in zip(mine, base))
        print(
            f"after the read, this / baseline per pair: median x{statistics.median(ratios):.2f} "
            f"(x{ratios[0]:.2f}-x{ratios[-1]:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
