"""A job of synchronous collectives made through deepspeed.comm with DeepSpeed's comms logger on,
for benchmarks/deepspeed_compare.py: each rank makes CALLS of every op at every size and writes
the logger's raw per-call records to OUT/ds-rank{R}.json.

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/deepspeed_job.py \\
        --out /tmp/ds --calls 20

DeepSpeed's timer for an op name keeps running across calls (of every size), so the logger's
"latency" of the k-th call of that name is the sum of the first k; the per-call time is the
difference of consecutive records in call order, which this job writes beside the raw lists.
Sizes are made one after another, so the order of the sizes' records is the call order.
"""

from __future__ import annotations

import argparse
import json
import os

import torch


def _per_call(sizes: dict) -> dict:
    """Per-call ms of one op name from the logger's running totals, by message size."""
    out, before = {}, 0.0
    for size, rec in sizes.items():
        out[str(size)] = [total - prev for prev, total in zip([before] + rec[1][:-1], rec[1])]
        before = rec[1][-1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--sizes", default="65536,1048576,4194304", help="message bytes, comma-separated")
    a = ap.parse_args()

    import sys

    import deepspeed.comm as dist
    from deepspeed.comm import comms_logger

    # On a CPU accelerator DeepSpeed compiles a shared-memory op at start-up (a minute or more
    # with ninja); it serves only inference_all_reduce, which this job does not make.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None

    dist.init_distributed(dist_backend="gloo")
    dist.configure(enabled=True, prof_all=True, verbose=False)
    n = dist.get_world_size()
    rank = dist.get_rank()
    dist.barrier()
    for size in (int(s) for s in a.sizes.split(",")):
        t = torch.ones(size // 4)
        out = torch.empty(size // 4 * n)
        chunk = torch.empty(size // 4 // n)
        for _ in range(a.calls):
            dist.all_reduce(t)
        for _ in range(a.calls):
            dist.broadcast(t, 0)
        for _ in range(a.calls):
            dist.all_gather_into_tensor(out, t)
        for _ in range(a.calls):
            dist.reduce_scatter_tensor(chunk, t)
    dist.barrier()
    raw = comms_logger.get_raw_data()
    per_call = {name: _per_call(sizes) for name, sizes in raw.items()}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"ds-rank{rank}.json"), "w") as f:
        json.dump(
            {
                "rank": rank,
                "world": n,
                "raw_ms": {k: {str(s): r[1] for s, r in v.items()} for k, v in raw.items()},
                "per_call_ms": per_call,
            },
            f,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
