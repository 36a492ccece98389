"""A 2-rank gloo job written as a user writes a first training loop (tests/views/test_one_voice.py):
ITERATIONS iterations of forward, an all_reduce of the gradient, optimizer.step(); rank 1
sleeps SLEEP_S before each all_reduce, so it is the slow rank and rank 0 waits for it. After the
loop, one barrier. No nsyscomm in it: the wrapper counts steps at optimizer.step()."""
import os
import time

import torch
import torch.distributed as dist

ITERATIONS = 8
SLEEP_S = 0.03


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(1024))
    opt = torch.optim.SGD([w], lr=0.01)
    for _ in range(ITERATIONS):
        w.grad = torch.ones(1024)
        if rank == 1:
            time.sleep(SLEEP_S)
        dist.all_reduce(w.grad)
        opt.step()
    # both ranks done before either tears gloo down (docs/capture.md, "A job that fails in its teardown")
    dist.barrier()
    # this rank's own record that its work is done (tests check it beside nsyscomm's verdict)
    if os.environ.get("NSYSCOMM_TEST_DONE_DIR"):
        open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"done.{dist.get_rank()}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
