"""A 2-stage pipeline by hand on 2 gloo ranks (tests/analyses/test_pipeline_job.py): stage 0 computes for
SLEEP_S (a sleep) and sends its activations; stage 1 receives them (a blocking recv: it waits for
the sleep), computes, and sends the gradient back; both take an optimizer step. Rank 1 prints the
period between its steps' ends (`period_ms <float>`) on its own clock.

The user code has no nsyscomm in it."""
import os
import time

import torch
import torch.distributed as dist

STEPS = 6
SLEEP_S = 0.08


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(256))
    opt = torch.optim.SGD([w], lr=0.01)
    act = torch.empty(4096)
    grad = torch.empty(4096)
    dist.barrier()  # the ranks meet before the first message
    ends = []
    for _ in range(STEPS):
        if rank == 0:
            time.sleep(SLEEP_S)  # the slow stage's forward
            dist.send(torch.full((4096,), float(w.sum())), dst=1)
            dist.recv(grad, src=1)
        else:
            dist.recv(act, src=0)  # RECV_LINE: waits for stage 0's forward
            dist.send(act * 0.5, dst=0)
        w.grad = torch.ones(256)
        opt.step()
        ends.append(time.perf_counter())
    if rank == 1:
        for a, b in zip(ends, ends[1:]):
            print(f"period_ms {(b - a) * 1e3:.3f}", flush=True)
    dist.barrier()
    # this rank's own record that its work is done (tests check it beside nsyscomm's verdict)
    if os.environ.get("NSYSCOMM_TEST_DONE_DIR"):
        open(os.path.join(os.environ["NSYSCOMM_TEST_DONE_DIR"], f"done.{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
