"""A parameterized gloo job for the capture benchmarks and tests: each rank makes CALLS
all-reduces of BYTES (float32), a broadcast every 10th call, spins COMPUTE_MS of pure-Python
work before each call, a barrier before and one after. Run under torchrun (or python -m torch.distributed.run).

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/gloo_job.py \\
        --calls 2000 --bytes 4096 --compute-ms 0.5

So rank r makes exactly calls all_reduce, ceil(calls / 10) broadcast and 2 barrier calls.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--timing", help="append 'rank wall_s cpu_s' of the loop to this file (benchmarks)")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    t = torch.ones(max(1, a.bytes // 4))
    spin = a.compute_ms / 1000.0
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(a.calls):
        if spin:
            end = time.perf_counter() + spin
            while time.perf_counter() < end:
                pass
        dist.all_reduce(t)
        if i % 10 == 0:
            dist.broadcast(t, 0)
    dist.barrier()
    if a.timing:
        with open(a.timing, "a") as f:
            f.write(f"{dist.get_rank()} {time.perf_counter() - t0:.6f} {time.process_time() - c0:.6f}\n")
    # this rank's own record that its work is done (tests check it beside nsyscomm's verdict)
    if os.environ.get("NSYSCOMM_TEST_DONE_DIR"):
        open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"done.{dist.get_rank()}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
