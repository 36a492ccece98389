"""nsyscomm run's own share of the wait after the job: reading the fresh export and printing the
summary, with and without the summary's imports done beforehand (beside the job, as `nsyscomm
run` does them now). The nsys tools' import and export are left out: their time moves with the
machine's load by more than this share (benchmarks/bench_capture.py measures the whole wait).

    python benchmarks/bench_after_export.py REPORT.arrow [--runs 5]

Each run is a fresh interpreter that imports what `nsyscomm run` has imported when the job
starts (the CLI and nsyscomm.api), then for "warm" runs commands.import_summary_stack(), then
times the summary of a fresh copy of REPORT (no cache entry: as after a run) printed to
/dev/null. "cold" and "warm" alternate; medians and each run's seconds are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CODE = """
import contextlib, os, sys, time
import nsyscomm.cli
from nsyscomm.api import load
from nsyscomm.commands.summarize import emit
if sys.argv[2] == "warm":
    from nsyscomm.commands import import_summary_stack
    import_summary_stack()
t0 = time.perf_counter()
r = load([sys.argv[1]])
with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
    emit(r, "text", "GBps", False)
print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="nsyscomm-after-") as tmp:
        for i in range(a.runs):
            for v in times:
                d = Path(tmp) / f"{v}{i}"
                d.mkdir()
                copy = d / a.report.name
                (shutil.copytree if a.report.is_dir() else shutil.copy)(a.report, copy)
                out = subprocess.run(
                    [sys.executable, "-c", CODE, str(copy), v],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=dict(os.environ, NSYSCOMM_CACHE_DIR=str(d / "cache")),  # an empty cache: a miss
                )
                times[v].append(float(out.stdout.split()[-1]))
    for v, xs in times.items():
        print(f"{v}: median {statistics.median(xs):.3f} s; runs " + ", ".join(f"{x:.3f}" for x in xs))
    print(f"warm / cold: x{statistics.median(times['warm']) / statistics.median(times['cold']):.3f}")


if __name__ == "__main__":
    main()
