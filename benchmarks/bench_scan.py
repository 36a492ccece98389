"""CPU time of the report's read (the C scan and its Python side), table by table, against
SQLite's own scan of the same columns, and against another tree's.

    python benchmarks/bench_scan.py REPORT.sqlite [--runs 5] [--baseline DIR]

Each run is a fresh process that imports what a summarize imports, then reads the report through
nsyscomm.ingest.nsys.reader._scan with one table at a time (the kernels; the kernels and their
launches, which need them; the NVTX ranges), then all three, then opens it as the extraction does
(open_report: _scan, the tables handed to DuckDB, the checks), each the best of three in that
process, CPU time of all threads (the scan runs on every core). The launches' figure is the
kernels and launches' less the kernels'. The floor: SQLite's total() over each used column of the
table, every row, one thread (bench_summarize.FLOOR), in this process. With --baseline, that
tree's run goes beside each of this one's, which one first alternating (benchmarks/baseline.py),
the file in the page cache before each. Prints the medians of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time

import baseline  # benchmarks/baseline.py, beside this script
from bench_summarize import FLOOR, warm

from nsyscomm.ingest.nsys.reader import read_only_uri

TABLES = {"kernels": "CUPTI_ACTIVITY_KIND_KERNEL", "launches": "CUPTI_ACTIVITY_KIND_RUNTIME", "ranges": "NVTX_EVENTS"}
CASES = {"kernels": ["kernels"], "kernels+launches": ["kernels", "launches"], "ranges": ["ranges"], "all": list(TABLES)}

CODE = """
import json, sys, time
from pathlib import Path
import nsyscomm.analyses, pandas, pyarrow  # what a summarize has imported when it reads
from nsyscomm import duck
from nsyscomm.ingest.nsys import reader
path, cases, big = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
tables = reader.table_columns(path)
def best(f):
    out = []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        out.append((time.process_time() - c0, time.perf_counter() - t0))
    return min(out)
def scan(names):
    con = duck.connect(sqlite=True)
    con.execute(f"ATTACH '{path}' AS r (TYPE sqlite, READ_ONLY)")
    kept = {t: c for t, c in tables.items() if t in names or t not in big}
    assert reader._scan(con, path, kept, bytearray(1)) is not None, "the scan gave way to DuckDB's copy"
    con.close()
out = {case: best(lambda: scan(names)) for case, names in cases.items()}
out["open_report"] = best(lambda: reader.open_report(path).con.close())
print(json.dumps(out))
"""


def floor_cpu(path: str) -> dict[str, float]:
    """CPU s of SQLite's own scan of each table's used columns (best of three)."""
    con = sqlite3.connect(read_only_uri(path), uri=True)
    out = {}
    for name, table in TABLES.items():
        cpus = []
        for _ in range(3):
            c0 = time.process_time()
            con.execute(f"SELECT count(*), {FLOOR[table]} FROM {table}").fetchall()
            cpus.append(time.process_time() - c0)
        out[name] = min(cpus)
    con.close()
    return out


def run(path: str, env: dict) -> dict:
    warm(path)
    cases = {case: [TABLES[n] for n in names] for case, names in CASES.items()}
    p = subprocess.run(
        [sys.executable, "-c", CODE, path, json.dumps(cases), json.dumps(list(TABLES.values()))],
        capture_output=True,
        text=True,
        env=env,
        cwd=baseline.RUN_DIR,
    )
    if p.returncode:
        raise SystemExit(p.stderr[-2000:])
    out = {k: v[0] for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}  # CPU s
    out["launches"] = out["kernels+launches"] - out["kernels"]
    return out


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
    floors: list[dict] = []
    loads = [os.getloadavg()[0]]
    for i in range(a.runs):
        warm(path)
        floors.append(floor_cpu(path))
        for out, e in baseline.in_turn(i, [(mine, env), (base, base_env)]):
            if e is not None:
                out.append(run(path, e))
        loads.append(os.getloadavg()[0])
        line = f"run {i + 1}: all {mine[-1]['all']:.3f} s, open_report {mine[-1]['open_report']:.3f} s"
        if base:
            line += f"; baseline all {base[-1]['all']:.3f} s, open_report {base[-1]['open_report']:.3f} s"
        print(line, flush=True)
    print(
        f"report {path}, load average {min(loads):.2f}-{max(loads):.2f}; CPU s (user + system, every thread), medians"
    )
    rows = ["kernels", "launches", "ranges", "all", "open_report"]
    floor = {k: statistics.median(f[k] for f in floors) for k in TABLES}
    floor["all"] = sum(floor.values())
    print(f"{'':12s} {'floor':>7s} {'this':>7s}" + (f" {'baseline':>9s} {'this/baseline':>14s}" if base else ""))
    for r in rows:
        m = statistics.median(x[r] for x in mine)
        line = f"{r:12s} {floor[r] if r in floor else float('nan'):7.3f} {m:7.3f}"
        if base:
            b = statistics.median(x[r] for x in base)
            ratios = sorted(x[r] / y[r] for x, y in zip(mine, base))
            line += f" {b:9.3f}   x{statistics.median(ratios):.2f} (x{ratios[0]:.2f}-x{ratios[-1]:.2f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
