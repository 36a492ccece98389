"""`nsyscomm summarize` of one report from its SQLite export and from its Arrow export, alternated.

    python benchmarks/bench_export_formats.py REPORT.sqlite [REPORT.arrow] [--runs 5]

Without REPORT.arrow, the SQLite file is rewritten as nsys 2022.4's Arrow export lays it out (one
IPC stream per table, tests/support/arrow_convert.py) next to it in a temporary folder. Each summarize is
a fresh process with --no-cache and --format json (the two outputs are checked to be equal);
prints the median and min wall time of each, and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_CLI = "import sys; from nsyscomm.cli import entry; sys.argv[0] = 'nsyscomm'; entry()"


def summarize(path: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "summarize", "--no-cache", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sqlite", type=Path)
    ap.add_argument("arrow", type=Path, nargs="?")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nsyscomm-fmt-") as tmp:
        arrow = a.arrow
        if arrow is None:
            sys.path.insert(0, str(ROOT))
            from tests.support.arrow_convert import convert

            t0 = time.perf_counter()
            arrow = convert(a.sqlite, Path(tmp) / a.sqlite.name)  # the same name: the same JSON
            print(f"# converted to Arrow streams in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        times: dict[str, list[float]] = {"sqlite": [], "arrow": []}
        outs = {}
        for _ in range(a.runs + 1):  # the first round warms the page cache and is dropped
            for kind, p in (("sqlite", a.sqlite), ("arrow", arrow)):
                dt, outs[kind] = summarize(p)
                times[kind].append(dt)
        same = outs["sqlite"] == outs["arrow"]
        print(
            f"# {a.sqlite.name}: SQLite {a.sqlite.stat().st_size / 1e6:.1f} MB, Arrow "
            f"{arrow.stat().st_size / 1e6:.1f} MB; {a.runs} runs each, alternated; identical JSON: {same}; "
            f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
        for kind, ts in times.items():
            ts = ts[1:]
            print(f"summarize from {kind:6s}  median {statistics.median(ts):6.2f} s  min {min(ts):6.2f} s")


if __name__ == "__main__":
    main()
