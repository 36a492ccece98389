"""A 2-rank gloo job whose optimizer-like step queues many asynchronous broadcasts on one process
group, with its own independent figures (tests/capture/test_queued_timing.py).

1. sync:  a synchronous broadcast of each size, REPS times; the program times each itself.
2. step:  after a first optimizer step, a barrier and a second optimizer step (the wrapper
          counts what follows as step 2), rank LATE_RANK sleeps LATE_S (timed by the program), then each rank queues CALLS
          broadcasts with async_op=True (sizes cycling through SIZES, roots alternating), as a
          sharded optimizer's step does, and only then waits for all of them. The program times
          the whole step (from before the sleep to the last wait's return) and the queue's drain
          (from its first enqueue to its last wait's return) on each rank, and notes the wall
          clock at its first enqueue (one clock for both ranks: how late the late rank came).

The figures go to $QUEUED_JOB_OUT/rank<r>.json. The user code has no nsyscomm in it.
"""

import json
import os
import time

import torch
import torch.distributed as dist

SIZES = (2048, 1 << 20)  # float32 elements: an 8 KiB and a 4 MiB message
CALLS = 16
REPS = 5
LATE_RANK = 0
LATE_S = 0.5


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {"rank": rank, "sizes": [4 * n for n in SIZES], "calls": CALLS, "late_rank": LATE_RANK}
    bufs = [torch.ones(n) for n in SIZES]
    for b in bufs:  # warm-up: gloo's first call of a size sets up its buffers
        dist.broadcast(b, src=0)
    dist.barrier()
    sync = {}
    for b in bufs:
        times = []
        for _ in range(REPS):
            t0 = time.perf_counter_ns()
            dist.broadcast(b, src=0)
            times.append(time.perf_counter_ns() - t0)
        sync[str(4 * b.numel())] = times
    out["sync_ns"] = sync
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    opt = torch.optim.SGD([param], lr=0.1)
    opt.step()  # its first step sets itself up (slow, and more so on one rank than the other)
    dist.barrier()  # both ranks ready: from here only the sleep sets them apart
    opt.step()  # quick now: the wrapper counts what follows as step 2

    t0 = time.perf_counter_ns()
    if rank == LATE_RANK:
        time.sleep(LATE_S)
        out["sleep_ns"] = time.perf_counter_ns() - t0
    out["enqueue_wall_ns"] = time.time_ns()
    t1 = time.perf_counter_ns()
    works = [dist.broadcast(bufs[i % len(bufs)], src=i % 2, async_op=True) for i in range(CALLS)]
    for w in works:
        w.wait()
    out["drain_ns"] = time.perf_counter_ns() - t1
    out["step_ns"] = time.perf_counter_ns() - t0
    t2 = time.perf_counter_ns()
    dist.barrier()  # still the wrapper's step 2: a rank slow to reach it keeps the other waiting
    out["barrier_ns"] = time.perf_counter_ns() - t2

    path = os.environ.get("QUEUED_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
