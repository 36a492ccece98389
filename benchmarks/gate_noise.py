"""The gate on real runs of a short CPU job (docs/gate.md, "Measured on real runs"): how many
unchanged runs fail against a baseline of a few runs (false alarms), and which communication
slowdowns of a known size (a sleep inside every call: tests/data/ci_train.py --comm-sleep-ms)
fail. Each run is `nsyscomm run` of the 2-rank gloo job of tests/data/ci_train.py; its folder is
kept and summarized again by the code under test, so a rerun with the same --out gates the same
captures with changed gate code.

    python benchmarks/gate_noise.py --baseline-runs 3 --runs 10 --slow-pct 5 10 20 30 --out /tmp/gate-noise

A slowdown of P% sleeps P% of a call's time inside every call: the baseline runs' median of the
job's collective time per call (its summary's total over its count). Each is also given as a share
of the calls' own time, the count-weighted mean of each gated key's fastest call (min_ms), which
the host's load inflates least. Prints one line per gated run (exit status, headline, each gated
key's fastest and mean call) and the counts."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

JOB = Path(__file__).resolve().parent.parent / "tests" / "data" / "ci_train.py"
CLI = [sys.executable, "-m", "nsyscomm.cli"]


def profile(out: Path, name: str, steps: int, comm_sleep_ms: float = 0.0) -> Path:
    """One run under nsyscomm run (kept when an earlier invocation made it); its JSON summary's
    path, made by the code under test."""
    folder = out / name
    if not (folder / "report.arrow").exists():
        cmd = [*CLI, "run", "-o", str(folder), "--no-summary", "--"]
        cmd += ["torchrun", "--standalone", "--nproc-per-node", "2", str(JOB), "--steps", str(steps)]
        if comm_sleep_ms:
            cmd += ["--comm-sleep-ms", f"{comm_sleep_ms:.4f}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        # gloo can abort a rank in its teardown, after the work (docs/capture.md): the report is whole
        if r.returncode != 0 and "failed in its teardown" not in r.stderr:
            raise SystemExit(f"{name}: nsyscomm run failed ({r.returncode}): {r.stderr[-2000:]}")
    r = subprocess.run([*CLI, "summarize", str(folder), "--format", "json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: nsyscomm summarize failed ({r.returncode}): {r.stderr[-2000:]}")
    path = out / f"{name}.json"
    path.write_text(r.stdout)
    return path


def gate(baseline: Path, run: Path) -> tuple[int, str]:
    r = subprocess.run(
        [*CLI, "gate", "--no-pyproject", "-b", str(baseline), str(run)], capture_output=True, text=True, timeout=600
    )
    return r.returncode, r.stdout.splitlines()[0] if r.stdout else r.stderr.strip()[-300:]


def rows(path: Path) -> list[dict]:
    """The summary rows of the keys the gate compares by default (10 calls or more)."""
    return [r for r in json.loads(path.read_text())["summary"] if r["calls"] >= 10]


def comm_ms(path: Path) -> float:
    """The job's collective time per call, over the summary's keys (ms)."""
    rs = json.loads(path.read_text())["summary"]
    return sum(r["total_ms"] for r in rs) / sum(r["count"] for r in rs)


def own_ms(path: Path) -> float:
    """The calls' own time: the count-weighted mean of each key's fastest call (ms)."""
    rs = rows(path)
    return sum(r["min_ms"] * r["count"] for r in rs) / sum(r["count"] for r in rs)


def fastest(path: Path) -> str:
    return ", ".join(f"{r['op']} {r['bytes']} B min {r['min_ms']:.3f} avg {r['avg_ms']:.3f}" for r in rows(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-runs", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10, help="unchanged runs gated against the baseline")
    ap.add_argument("--slow-pct", type=float, nargs="*", default=[30.0], help="slowdowns: %% of a call's time")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base_runs = [profile(args.out, f"base{i}", args.steps) for i in range(args.baseline_runs)]
    baseline = args.out / "baseline.json"
    subprocess.run([*CLI, "baseline", "--output", str(baseline), *map(str, base_runs)], check=True, capture_output=True)
    for p in base_runs:
        print(f"baseline {p.stem}: {fastest(p)}", flush=True)
    per_call = statistics.median(comm_ms(p) for p in base_runs)
    own = statistics.median(own_ms(p) for p in base_runs)
    alarms = 0
    for i in range(args.runs):
        same = profile(args.out, f"same{i}", args.steps)
        code, head = gate(baseline, same)
        alarms += code != 0
        print(f"unchanged run {i}: exit {code}: {head} [{fastest(same)}]", flush=True)
    detected = []
    for pct in args.slow_pct:
        sleep_ms = per_call * pct / 100
        slow = profile(args.out, f"slow{pct:g}", args.steps, sleep_ms)
        code, head = gate(baseline, slow)
        if code == 1:
            detected.append(pct)
        print(
            f"slowdown +{pct:g}% (+{sleep_ms:.3f} ms per call of {per_call:.3f} ms, {sleep_ms / own:.0%} of the "
            f"fastest calls' {own:.3f} ms): exit {code}: {head} [{fastest(slow)}]"
        )
    print(f"false alarms: {alarms}/{args.runs}; slowdowns detected: {detected or 'none'} of {args.slow_pct}")


if __name__ == "__main__":
    main()
