"""A 4-rank gloo job with two kinds of late rank (tests/analyses/test_straggler_rank.py): rank 1
is late by a hair at every all_reduce (it spins HAIR_S before each), rank 2 sleeps SLEEP_S before
the second all_reduce of steps SLEEP_STEPS. Rank 1 arrives last far more often; rank 2 keeps the
three others waiting far longer: the straggler is rank 2.
"""
import os
import time

import torch
import torch.distributed as dist

STEPS = 6
HAIR_S = 0.01
SLEEP_S = 0.3
SLEEP_STEPS = (1, 3, 5)


def spin(seconds: float) -> None:
    """A little more work than the other ranks."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(64))
    opt = torch.optim.SGD([w], lr=0.1)
    slept = []  # each sleep as this program measured it
    for step in range(STEPS):
        w.grad = torch.ones(64)
        if rank == 1:
            spin(HAIR_S)
        dist.all_reduce(w.grad)
        if rank == 1:
            spin(HAIR_S)
        if rank == 2 and step in SLEEP_STEPS:
            t0 = time.perf_counter()
            time.sleep(SLEEP_S)
            slept.append(time.perf_counter() - t0)
        t = torch.ones(1024)
        dist.all_reduce(t)
        opt.step()
    dist.barrier()  # every rank done before gloo is torn down (docs/capture.md)
    out = os.environ.get("NSYSCOMM_TEST_DONE_DIR")
    if out:
        with open(os.path.join(out, f"sleeps.{rank}"), "w") as f:
            f.write("".join(f"{s:.6f}\n" for s in slept))
        open(os.path.join(out, f"done.{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
