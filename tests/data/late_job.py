"""A 2-rank gloo job with a host-side straggler (tests/test_late.py): before the second
all_reduce of every step rank 1 sleeps SLEEP_S, so rank 0 waits that long in it.

Steps are the optimizer's (nsyscomm's wrapper detects optimizer.step()); the user code has no
nsyscomm in it.
"""
import time

import torch
import torch.distributed as dist

STEPS = 6
SLEEP_S = 0.15


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(64))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(STEPS):
        w.grad = torch.ones(64)
        dist.all_reduce(w.grad)                    # on time on both ranks
        if rank == 1:
            time.sleep(SLEEP_S)                    # the host stall, recorded by nsys -t osrt
        t = torch.ones(1024)
        dist.all_reduce(t)   # LATE_LINE: rank 1 arrives late here
        opt.step()
    # both ranks done before either tears gloo down: without it a rank aborts at exit in about one
    # run in seven, profiled or not (docs/capture.md, "A job that fails in its teardown")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
