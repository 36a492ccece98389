"""A small report summarized without a cache, beside nsys-ai's NCCL breakdown of the same file:
wall time, CPU time (user and system, every thread) and peak RSS of each, every variant in a
fresh process, alternated run by run so that the machine's changing load falls on all of them
alike; medians, and the median of the per-run ratios. On a busy machine the CPU time moves
less with the load than the wall time does.

    python benchmarks/bench_small_report.py [REPORT] [--runs 15] [--nsys-ai VENV/bin/nsys-ai]
        [--nsys-ai-home DIR] [--baseline DIR]

REPORT: an nsys SQLite export (default: the real 2xH100 window, ../shared/real/nsys/
nsys2026.2_2xH100_nccl_window.sqlite, 2.7 MB, 66 NCCL calls on two GPUs).

nsys-ai (pip install nsys-ai==0.3.0 into a virtual environment of its own; with the same DuckDB
as nsyscomm, pip install duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5 there) runs
`nsys-ai nccl REPORT --gpu 0 --trim START END`, its breakdown of one GPU's NCCL kernels over
the whole capture, with NSYS_AI_CACHE_MODE=direct: no Parquet cache, the export queried in
place, as `summarize --no-cache` reads it. It loads DuckDB's sqlite_scanner extension from
DuckDB's extension folder under HOME and never downloads it here: --nsys-ai-home DIR is the HOME
its runs get, where this script installs the extension from nsyscomm's own package
(duckdb-extension-sqlite-scanner) once. Without --nsys-ai, nsyscomm's variants run alone.

--baseline DIR: nsyscomm's variants (text and JSON) also run from another checkout
(PYTHONPATH=DIR), in the same alternation. "the libraries' imports alone" is the floor: click,
rich, DuckDB, numpy, pyarrow and pandas imported, nothing else done.

What each prints is checked to agree once: rank 0's communication time (nsyscomm's JSON) and
the sum of GPU 0's NCCL kernels (nsys-ai's breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import baseline  # benchmarks/baseline.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT.parent / "shared" / "real" / "nsys" / "nsys2026.2_2xH100_nccl_window.sqlite"
RUN_CLI = "import sys; from nsyscomm.__main__ import entry; sys.argv[0] = 'nsyscomm'; entry()"
# what any summary imports before it opens a report: the floor of its time on this machine (pyarrow
# imports pandas itself, at its first array, and DuckDB imports pyarrow.dataset to scan Arrow)
IMPORTS = "import click, rich.console, duckdb, numpy, pyarrow, pyarrow.dataset, pandas"


def run(cmd: list[str], env: dict) -> tuple[float, float, str, float]:
    """(wall s, peak RSS MB, stdout, CPU s: user and system) of one run of cmd."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=baseline.RUN_DIR)
    assert p.stdout is not None
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit status {p.returncode}")
    return wall, usage.ru_maxrss / 1024, out.decode(errors="replace"), usage.ru_utime + usage.ru_stime


def capture_s(report: Path) -> tuple[float, float]:
    """The report's kernels' span in seconds (nsys-ai's --trim takes the window in seconds)."""
    lite = sqlite3.connect(f"file:{report}?mode=ro&immutable=1", uri=True)
    lo, hi = lite.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    lite.close()
    return lo // 10**9, hi // 10**9 + 1


def nsys_ai_env(home: Path, nsys_ai: Path) -> dict:
    """HOME for nsys-ai's runs, with DuckDB's sqlite_scanner installed there from the package."""
    py = nsys_ai.parent / "python"
    code = (
        "import duckdb, pathlib, duckdb_extension_sqlite_scanner as e\n"
        "f = sorted(pathlib.Path(e.__file__).parent.glob('extensions/*/sqlite_scanner.duckdb_extension'))[-1]\n"
        "duckdb.connect().execute(f\"INSTALL '{f}'\")\n"
    )
    env = dict(os.environ, HOME=str(home), NSYS_AI_CACHE_MODE="direct")
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(py), "-c", code], env=env, check=True)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", type=Path, nargs="?", default=REPORT)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--nsys-ai", type=Path, help="the nsys-ai command of a virtual environment of its own")
    ap.add_argument("--nsys-ai-home", type=Path, default=Path("/tmp/nsys-ai-home"), help="HOME of its runs")
    ap.add_argument("--baseline", type=Path, help="another checkout of nsyscomm, run in the same alternation")
    args = ap.parse_args()
    report = args.report.resolve()

    # an installed package has its .pyc files; with PYTHONDONTWRITEBYTECODE every run compiles
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    py = sys.executable
    summarize = [py, "-c", RUN_CLI, "summarize", str(report), "--no-cache"]
    cases: dict[str, tuple[list[str], dict]] = {
        "python -c pass": ([py, "-c", "pass"], env),
        "the libraries' imports alone": ([py, "-c", IMPORTS], env),
        "nsyscomm summarize --no-cache (text)": (summarize, env),
        "nsyscomm summarize --no-cache --format json": ([*summarize, "--format", "json"], env),
    }
    if args.baseline:
        benv = dict(env, PYTHONPATH=str(args.baseline.resolve()))
        baseline.check(args.baseline, benv)
        base_cli = RUN_CLI.replace("nsyscomm.__main__", "nsyscomm.cli")  # older trees have no __main__
        cases["baseline: summarize --no-cache (text)"] = ([py, "-c", base_cli, *summarize[3:]], benv)
        cases["baseline: summarize --no-cache --format json"] = (
            [py, "-c", base_cli, *summarize[3:], "--format", "json"],
            benv,
        )
    if args.nsys_ai:
        lo, hi = capture_s(report)
        aenv = nsys_ai_env(args.nsys_ai_home, args.nsys_ai)
        cmd = [str(args.nsys_ai), "nccl", str(report), "--gpu", "0", "--trim", str(lo), str(hi)]
        cases["nsys-ai nccl --gpu 0 (no cache)"] = (cmd, aenv)

    outputs = {name: run(cmd, e)[2] for name, (cmd, e) in cases.items()}  # warm: .pyc, page cache
    ranks = json.loads(outputs["nsyscomm summarize --no-cache --format json"])["ranks"]
    print(f"# {report.name}: nsyscomm rank 0 comm {ranks[0]['comm_ms']:.3f} ms", end="")
    if args.nsys_ai:
        found = re.findall(r"(\w+)\s+[\d.]+%\s+([\d.]+)ms\s+×(\d+)", outputs["nsys-ai nccl --gpu 0 (no cache)"])
        print("; nsys-ai GPU 0:", ", ".join(f"{op} {ms} ms x{n}" for op, ms, n in found), end="")
    print()

    walls: dict[str, list[float]] = {name: [] for name in cases}
    rss: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (cmd, e) in cases.items():
            w, m, _, c = run(cmd, e)
            walls[name].append(w)
            rss[name].append(m)
            cpus[name].append(c)
    print(
        f"# {args.runs} runs each, alternated; load average {os.getloadavg()[0]:.2f} (1 min) at the end; "
        f"{os.cpu_count()} cores"
    )
    # CPU time (user + system, all threads) moves less than wall time with the machine's load
    print(f"{'variant':46s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'CPU s':>6s} {'peak RSS MB':>12s}")
    for name in cases:
        ts = walls[name]
        print(
            f"{name:46s} {statistics.median(ts):9.3f} {min(ts):7.3f} {max(ts):7.3f} "
            f"{statistics.median(cpus[name]):6.3f} {statistics.median(rss[name]):12.0f}"
        )
    for fmt in ("text", "json"):
        mine = next(n for n in cases if n.startswith("nsyscomm summarize") and (fmt == "json") == n.endswith("json"))
        for other in (
            "the libraries' imports alone",
            "nsys-ai nccl --gpu 0 (no cache)",
            f"baseline: {mine.removeprefix('nsyscomm ')}",
        ):
            if other not in walls:
                continue
            for what, of in (("wall", walls), ("CPU", cpus)):
                ratios = [a / b for a, b in zip(of[mine], of[other])]
                print(
                    f"# summarize ({fmt}) / {other}, {what}: median per run x{statistics.median(ratios):.2f} "
                    f"(x{min(ratios):.2f}-x{max(ratios):.2f})"
                )


if __name__ == "__main__":
    main()
