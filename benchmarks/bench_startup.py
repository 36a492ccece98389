"""Start-up time of the CLI: medians of repeated runs, each variant in a fresh process, the
variants alternated run by run so that a machine's changing load falls on all of them alike.

    python benchmarks/bench_startup.py [--runs 15] [--baseline DIR]

Variants: the bare interpreter (`python -c pass`: the floor no command can go under; on this
machine it includes the site-packages' .pth files), `nsyscomm --help`, `nsyscomm summarize` of
the bundled 4-rank sample (text, and --format json; --no-cache and with the cache warm).
--baseline DIR: the same commands run from another checkout of nsyscomm (e.g. an older commit
unpacked with `git archive`), put first on sys.path, in the same alternation.

The runs write and use .pyc files, as an installed package does, even where
PYTHONDONTWRITEBYTECODE is set. Also prints, from `python -X importtime`, the modules imported by `import nsyscomm.cli` and by a
summarize, the largest first (cumulative microseconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import baseline  # benchmarks/baseline.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_reports" / "synthetic_ddp_4rank.sqlite"
RUN_CLI = "import sys; from nsyscomm.cli import entry; sys.argv[0] = 'nsyscomm'; entry()"


def variants(sample: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "nsyscomm --help": [py, "-c", RUN_CLI, "--help"],
        "summarize sample (text, --no-cache)": [py, "-c", RUN_CLI, "summarize", "--no-cache", str(sample)],
        "summarize sample (text, cache warm)": [py, "-c", RUN_CLI, "summarize", str(sample)],
        "summarize sample (json, --no-cache)": [
            py,
            "-c",
            RUN_CLI,
            "summarize",
            "--no-cache",
            "--format",
            "json",
            str(sample),
        ],
    }


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True, cwd=baseline.RUN_DIR)
    return time.perf_counter() - t0


def importtime(cmd: list[str], env: dict, top: int) -> list[tuple[int, str]]:
    """(cumulative us, module) of the top-level imports of cmd, the largest first."""
    out = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, env=env, cwd=baseline.RUN_DIR
    ).stderr
    rows = []
    for line in out.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum, name = line[len("import time:") :].split("|")
        depth = (len(name) - len(name.lstrip())) // 2
        if depth <= 1:
            rows.append((int(cum), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline", type=Path, help="another checkout of nsyscomm, run in the same alternation")
    ap.add_argument("--top", type=int, default=12, help="modules listed from -X importtime")
    args = ap.parse_args()

    # an installed package has its .pyc files (pip compiles them); with PYTHONDONTWRITEBYTECODE
    # set, as in this project's sandbox, every run would compile nsyscomm's sources again
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print("# PYTHONDONTWRITEBYTECODE is set here: unset for the runs, so that the warm-up writes .pyc files")
    envs = {"this": base_env}
    if args.baseline:
        envs["baseline"] = dict(base_env, PYTHONPATH=str(args.baseline.resolve()))
        baseline.check(args.baseline, envs["baseline"])  # its own code and SQL, not this checkout's
    cases = [
        (f"{name} [{which}]" if args.baseline else name, cmd, env)
        for name, cmd in variants(SAMPLE).items()
        for which, env in envs.items()
        if not (which == "baseline" and name == "python -c pass")
    ]
    for _, cmd, env in cases:  # warm: .pyc files, the page cache, the report cache
        timed(cmd, env)
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(args.runs):
        for name, cmd, env in cases:
            times[name].append(timed(cmd, env))
    print(
        f"# {args.runs} runs each, alternated; load average {os.getloadavg()[0]:.2f} "
        f"(1 min) at the end; {os.cpu_count()} cores"
    )
    print(f"{'variant':48s} {'median s':>9s} {'min s':>7s} {'max s':>7s}")
    for name, ts in times.items():
        print(f"{name:48s} {statistics.median(ts):9.3f} {min(ts):7.3f} {max(ts):7.3f}")
    v = variants(SAMPLE)
    for label, key in (
        ("import nsyscomm.cli (nsyscomm --help)", "nsyscomm --help"),
        ("summarize sample", "summarize sample (text, --no-cache)"),
    ):
        print(f"\n# -X importtime, {label}: cumulative ms of the top-level imports")
        for us, name in importtime(v[key], envs["this"], args.top):
            print(f"{us / 1000:8.1f}  {name}")


if __name__ == "__main__":
    main()
