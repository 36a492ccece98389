"""A 2-rank gloo job with a host-side straggler (tests/analyses/test_late.py): before the second
all_reduce of every step rank 1 sleeps SLEEP_S, so rank 0 waits that long in it.

Steps are the optimizer's (nsyscomm's wrapper detects optimizer.step()); the user code has no
nsyscomm in it.
"""
import os
import time

import torch
import torch.distributed as dist

STEPS = 6
SLEEP_S = 0.15


def main():
    dist.init_process_group("gloo")
    ready_ns = time.monotonic_ns()  # the ranks met in init_process_group (the test's start-up clock)
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(64))
    opt = torch.optim.SGD([w], lr=0.1)
    slept = []  # each sleep as this program measured it (the test's bounds come from these)
    first_ns = None
    for _ in range(STEPS):
        w.grad = torch.ones(64)
        first_ns = first_ns or time.monotonic_ns()
        dist.all_reduce(w.grad)                    # on time on both ranks
        if rank == 1:
            t0 = time.perf_counter()
            time.sleep(SLEEP_S)                    # the host stall, recorded by nsys -t osrt
            slept.append(time.perf_counter() - t0)
        t = torch.ones(1024)
        dist.all_reduce(t)   # LATE_LINE: rank 1 arrives late here
        opt.step()
    # both ranks done before either tears gloo down: without it a rank aborts at exit in about one
    # run in seven, profiled or not (docs/capture.md, "A job that fails in its teardown")
    dist.barrier()
    # this rank's own record that its work is done (tests check it beside nsyscomm's verdict)
    if os.environ.get("NSYSCOMM_TEST_DONE_DIR"):
        with open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"sleeps.{rank}"), "w") as f:
            f.write("".join(f"{s:.6f}\n" for s in slept))
        # how long this rank took from meeting the others to its first collective: on a busy
        # machine one rank can take far longer, and is then late at the first all_reduce
        with open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"first.{rank}"), "w") as f:
            f.write(f"{(first_ns - ready_ns) / 1e6:.6f}\n")
        open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"done.{dist.get_rank()}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
