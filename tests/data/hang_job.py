"""A small gloo job with one injected fault (tests/analyses/test_hang_e2e.py).

HANG_FAULT=stop:   rank 1 stops (sleeps) before its 4th all_reduce: the others wait in it.
HANG_FAULT=size:   rank 2 passes 2x the elements at the 4th all_reduce: gloo aborts the call.
HANG_FAULT=raise:  rank 3 raises an exception before its 4th all_reduce.
HANG_FAULT=none:   no fault.
"""
import os
import time

import torch
import torch.distributed as dist

FAULT = os.environ.get("HANG_FAULT", "none")
STEPS = 6
AT = 3   # the 4th all_reduce (seq 3 of the world group; no other collective before it)


def step(rank, i):
    n = 256
    if FAULT == "stop" and rank == 1 and i == AT:
        time.sleep(3600)
    if FAULT == "raise" and rank == 3 and i == AT:
        raise RuntimeError("injected failure on rank 3")
    if FAULT == "size" and rank == 2 and i == AT:
        n = 512
    t = torch.ones(n)
    dist.all_reduce(t)   # the fault's line: callers are named hang_job.py:<this line>


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for i in range(STEPS):
        step(rank, i)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
