"""`nsyscomm summarize` over many small per-rank reports: time linear in their count.

    python benchmarks/bench_many_reports.py [--counts 128 256 512 1024] [--jobs N]

Generates N per-rank reports (benchmarks/gen_large_report.py --per-rank, 2 steps x 4 layers x
10 kernels each) in a temporary folder and times summarize on them in a fresh process,
without the cache and then with it warm. Prints seconds and ms per report for each N.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args(argv)
    spec = importlib.util.spec_from_file_location("gen_large_report", HERE / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    tmp = Path(tempfile.mkdtemp(prefix="nsyscomm-many-"))
    env = dict(os.environ, NSYSCOMM_CACHE_DIR=str(tmp / "cache"))
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for n in a.counts:
        folder = tmp / f"n{n}"
        info = gen.generate(folder, ranks=n, steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2, per_rank=True)
        extra = ["--jobs", str(a.jobs)] if a.jobs else []
        times = {}
        for label, flags in (("no cache", ["--no-cache"]), ("fill cache", []), ("cache hit", [])):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "nsyscomm.cli", "summarize", str(folder), "--format", "json",
                                *flags, *extra], capture_output=True, text=True, env=env)
            times[label] = time.perf_counter() - t0
            if p.returncode:
                raise SystemExit(p.stderr[-2000:])
        print(f"{n:5d} reports ({info['rows']:,} rows): no cache {times['no cache']:.1f} s "
              f"({1000 * times['no cache'] / n:.1f} ms/report), cache hit {times['cache hit']:.1f} s "
              f"({1000 * times['cache hit'] / n:.1f} ms/report)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
