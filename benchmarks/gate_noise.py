"""The gate on real runs of a short CPU job (docs/gate.md, "Measured on real runs"): how many
unchanged runs fail against a baseline of a few runs (false alarms), and whether a communication
slowdown of a known size (a sleep inside every call: tests/data/ci_train.py --comm-sleep-ms)
fails. Each run is `nsyscomm run` of the 2-rank gloo job of tests/data/ci_train.py.

    python benchmarks/gate_noise.py --baseline-runs 3 --runs 10 --slow-pct 30 --out /tmp/gate-noise

Prints one line per gated run (exit status and headline) and the counts."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).resolve().parent.parent / "tests" / "data" / "ci_train.py"


def profile(out: Path, name: str, steps: int, comm_sleep_ms: float = 0.0) -> Path:
    """One run under nsyscomm run; its JSON summary's path."""
    cmd = [sys.executable, "-m", "nsyscomm.cli", "run", "-o", str(out / name), "--format", "json", "--"]
    cmd += ["torchrun", "--standalone", "--nproc-per-node", "2", str(JOB), "--steps", str(steps)]
    if comm_sleep_ms:
        cmd += ["--comm-sleep-ms", f"{comm_sleep_ms:.4f}"]
    path = out / f"{name}.json"
    if path.exists():  # a run an earlier invocation made: kept
        return path
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # gloo can abort a rank in its teardown, after the work (docs/capture.md): the report is whole
    if r.returncode != 0 and "failed in its teardown" not in r.stderr:
        raise SystemExit(f"{name}: nsyscomm run failed ({r.returncode}): {r.stderr[-2000:]}")
    json.loads(r.stdout)  # the summary is there
    path.write_text(r.stdout)
    return path


def gate(baseline: Path, run: Path) -> tuple[int, str]:
    r = subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", "gate", "--no-pyproject", "-b", str(baseline), str(run)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return r.returncode, r.stdout.splitlines()[0] if r.stdout else r.stderr.strip()[-300:]


def comm_ms(path: Path) -> float:
    """The job's collective time per call, over the summary's keys (ms)."""
    rows = json.loads(path.read_text())["summary"]
    return sum(r["total_ms"] for r in rows) / sum(r["count"] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-runs", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10, help="unchanged runs gated against the baseline")
    ap.add_argument("--slow-pct", type=float, default=30.0, help="the slowdown run's added time per call, %%")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base_runs = [profile(args.out, f"base{i}", args.steps) for i in range(args.baseline_runs)]
    baseline = args.out / "baseline.json"
    subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", "baseline", "--output", str(baseline), *map(str, base_runs)],
        check=True,
        capture_output=True,
    )
    per_call = statistics.median(comm_ms(p) for p in base_runs)
    alarms = 0
    for i in range(args.runs):
        code, head = gate(baseline, profile(args.out, f"same{i}", args.steps))
        alarms += code != 0
        print(f"unchanged run {i}: exit {code}: {head}", flush=True)
    sleep_ms = per_call * args.slow_pct / 100
    slow = profile(args.out, "slow", args.steps, sleep_ms)
    code, head = gate(baseline, slow)
    print(f"slowdown run (+{sleep_ms:.3f} ms per call, {args.slow_pct:g}% of {per_call:.3f} ms): exit {code}: {head}")
    print(f"false alarms: {alarms}/{args.runs}; slowdown detected: {'yes' if code == 1 else 'no'}")


if __name__ == "__main__":
    main()
