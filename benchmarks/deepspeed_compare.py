"""nsyscomm's per-call times against DeepSpeed's comms logger on the same calls.

Runs benchmarks/deepspeed_job.py (synchronous collectives through deepspeed.comm, the comms
logger on) under `nsyscomm run`, then matches each rank's k-th call of an op in DeepSpeed's
records with its k-th call of that op in nsyscomm's table, and prints, per op and size, the
median per-call time of each and the median of their per-call ratio. Both clocks time the same
blocking call on the same rank, so the ratio is near 1 on a busy machine too (load stretches
both alike). Needs deepspeed importable by PYTHON (it is not a test requirement):

    python benchmarks/deepspeed_compare.py --python /path/to/venv-with-deepspeed/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# DeepSpeed's log names for the ops whose torch name nsyscomm reports by its collective
DEEPSPEED_OPS = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}


def run_job(python: str, out: Path, calls: int, sizes: str, ranks: int) -> None:
    cmd = [
        sys.executable, "-m", "nsyscomm.cli", "run", "-o", str(out), "--no-summary", "--",
        python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
        str(HERE / "deepspeed_job.py"), "--out", str(out / "ds"), "--calls", str(calls), "--sizes", sizes,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def deepspeed_calls(folder: Path) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """(rank, op) -> [(bytes, ms)] in call order, from the job's per-call records."""
    out: dict[tuple[int, str], list[tuple[int, float]]] = {}
    for f in sorted(folder.glob("ds-rank*.json")):
        doc = json.loads(f.read_text())
        for op, sizes in doc["per_call_ms"].items():
            out[(doc["rank"], DEEPSPEED_OPS.get(op, op))] = [
                (int(size), ms) for size, times in sizes.items() for ms in times
            ]
    return out


def nsyscomm_calls(folder: Path) -> dict[tuple[int, str], list[float]]:
    """(rank, op) -> [execution span in ms] in call order, from nsyscomm's collectives table."""
    from nsyscomm import api

    table = api.load(folder).collectives.sort_values(["rank", "cpu_start"])
    out: dict[tuple[int, str], list[float]] = {}
    for row in table.itertuples():
        out.setdefault((int(row.rank), str(row.op)), []).append((row.exec_end - row.exec_start) / 1e6)
    return out


def compare(ds: dict, ns: dict) -> list[dict]:
    rows: dict[tuple[str, int], dict[str, list[float]]] = {}
    for (rank, op), records in ds.items():
        spans = ns.get((rank, op), [])
        if len(spans) != len(records):
            raise SystemExit(f"rank {rank} {op}: DeepSpeed logged {len(records)} calls, nsyscomm has {len(spans)}")
        for (size, ds_ms), ns_ms in zip(records, spans):
            r = rows.setdefault((op, size), {"ds": [], "ns": [], "ratio": []})
            r["ds"].append(ds_ms)
            r["ns"].append(ns_ms)
            r["ratio"].append(ns_ms / ds_ms if ds_ms > 0 else float("nan"))
    return [
        {
            "op": op,
            "bytes": size,
            "calls": len(r["ds"]),
            "deepspeed_ms": statistics.median(r["ds"]),
            "nsyscomm_ms": statistics.median(r["ns"]),
            "ratio": statistics.median(r["ratio"]),
        }
        for (op, size), r in sorted(rows.items())
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="a Python that can import deepspeed and torch")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--sizes", default="65536,1048576,4194304")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--keep", help="run in this new folder and keep it")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.keep) if a.keep else Path(tmp) / "run"
        run_job(a.python, out, a.calls, a.sizes, a.ranks)
        rows = compare(deepspeed_calls(out / "ds"), nsyscomm_calls(out))
    print(f"{'op':<24} {'bytes':>9} {'calls':>5} {'DeepSpeed ms':>12} {'nsyscomm ms':>12} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['op']:<24} {r['bytes']:>9} {r['calls']:>5} {r['deepspeed_ms']:>12.3f} "
            f"{r['nsyscomm_ms']:>12.3f} {r['ratio']:>6.3f}"
        )


if __name__ == "__main__":
    main()
