"""A 2-rank gloo job for `nsyscomm run --steps 2:4` (tests/capture/test_window.py): six steps of
two all_reduces each, steps counted by the optimizer (nsyscomm's wrapper sees optimizer.step());
in step 2 rank 1 sleeps SLEEP_S before its second all_reduce, so rank 0 waits that long there.
Rank 1 prints how long it slept, as it measured it, and with NSYSCOMM_TEST_DONE_DIR set writes it
there (slept.1) with a file per rank once its work is done (done.R)."""

import os
import time

import torch
import torch.distributed as dist

STEPS = 6
SLEEP_S = 0.02
SLOW_STEP = 2


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(256))
    opt = torch.optim.SGD([w], lr=0.1)
    slept_ms = 0.0
    for step in range(STEPS):
        w.grad = torch.ones(256)
        dist.all_reduce(w.grad)
        if rank == 1 and step == SLOW_STEP:
            t0 = time.perf_counter()
            time.sleep(SLEEP_S)
            slept_ms = (time.perf_counter() - t0) * 1e3
            print(f"rank 1 slept {slept_ms:.3f} ms in step {step}", flush=True)
        t = torch.ones(1024)
        dist.all_reduce(t)  # AFTER_SLEEP: rank 0 waits here for rank 1
        opt.step()
    dist.barrier()
    done = os.environ.get("NSYSCOMM_TEST_DONE_DIR")
    if done:
        if rank == 1:
            with open(os.path.join(done, "slept.1"), "w") as f:
                f.write(f"{slept_ms:.6f}\n")
        open(os.path.join(done, f"done.{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
