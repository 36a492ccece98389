"""A 2-rank gloo job made of asynchronous calls, with its own independent figures
(tests/capture/test_async_timing.py): the program times a synchronous all_reduce of each size itself,
and rank 1 sleeps before some calls so that rank 0's work cannot complete before rank 1 enqueues.

Phases, each separated by a barrier (their calls are told apart by seq in the test):
1. sync:   BIG all_reduce, synchronous, REPS times; the program records each one's wall time.
2. async:  BIG all_reduce with async_op=True, then a compute stand-in (a sleep), then wait().
3. late:   async all_reduce; rank 1 sleeps LATE_S before it. Rank 0 waits in wait().
4. p2p:    rank 0 irecv from 1, rank 1 sleeps LATE_S then isend; both wait(). Then both ways
           at once through batch_isend_irecv, rank 1 LATE_S late again.
   Then rank 0 isends, sleeps SEND_WAIT_S and only then waits; rank 1 receives at once
           (a synchronous recv it times itself): the send is done long before its wait.
5. funcol: functional all_reduce + wait_tensor; rank 1 sleeps LATE_S before it.
6. ddp:    DDP (bucket_cap_mb small) forward/backward STEPS times; the bucket all_reduces run on
           gloo's thread while backward goes on. Each bucket holds one layer's parameters (LAYER
           elements, past the first step), so the program times a synchronous all_reduce of LAYER
           elements too, after the steps.

The figures go to $ASYNC_JOB_OUT/rank<r>.json. The user code has no nsyscomm in it.
"""

import json
import os
import time

import torch
import torch.distributed as dist

BIG = 1 << 22  # float32 elements: a 16 MiB message, whose transfer dwarfs the enqueue on a busy machine
REPS = 5
LATE_S = 0.4
COMPUTE_S = 0.15
SEND_WAIT_S = 0.3
STEPS = 3
WIDTH = 512
LAYER = WIDTH * WIDTH + WIDTH  # float32 elements of one Linear(WIDTH, WIDTH)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {"rank": rank}
    t = torch.ones(BIG)
    dist.all_reduce(t)  # warm-up (gloo's first call of a size sets up buffers)
    dist.barrier()
    sync_ns = []
    for _ in range(REPS):
        t0 = time.perf_counter_ns()
        dist.all_reduce(t)
        sync_ns.append(time.perf_counter_ns() - t0)
    out["sync_ns"] = sync_ns
    dist.barrier()

    w = dist.all_reduce(t, async_op=True)
    time.sleep(COMPUTE_S)
    w.wait()
    dist.barrier()

    if rank == 1:
        time.sleep(LATE_S)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    dist.barrier()

    buf = torch.zeros(BIG // 4)
    if rank == 0:
        w = dist.irecv(buf, src=1)
    else:
        time.sleep(LATE_S)
        w = dist.isend(buf, dst=0)
    w.wait()
    dist.barrier()

    # the same exchange both ways through batch_isend_irecv (what pipeline schedules call)
    if rank == 1:
        time.sleep(LATE_S)
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, buf, peer), dist.P2POp(dist.irecv, torch.zeros_like(buf), peer)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    dist.barrier()

    # a send waited for long after it was done: gloo's send Work has no future to mark its end
    t0 = time.perf_counter_ns()
    if rank == 0:
        out["send_start_wall_ns"] = time.time_ns()  # one clock for both ranks: the send's longest life
        w = dist.isend(buf, dst=1)
        time.sleep(SEND_WAIT_S)
        out["send_sleep_ns"] = time.perf_counter_ns() - t0
        w.wait()
    else:
        dist.recv(buf, src=0)
        out["recv_ns"] = time.perf_counter_ns() - t0
        out["recv_end_wall_ns"] = time.time_ns()
    dist.barrier()

    import torch.distributed._functional_collectives as fc

    if rank == 1:
        time.sleep(LATE_S)
    y = fc.all_reduce(t, "sum", dist.group.WORLD)
    out["funcol_sum"] = float(y[0])  # a view of the result: AsyncCollectiveTensor waits (wait_tensor)
    dist.barrier()

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(4)])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(64, WIDTH)
    backward_ns = []  # each backward as the program timed it: DDP's reducer waits inside it
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ddp(x).sum()
        t0 = time.perf_counter_ns()
        loss.backward()
        backward_ns.append(time.perf_counter_ns() - t0)
        opt.step()
    out["backward_ns"] = backward_ns
    dist.barrier()
    layer = torch.ones(LAYER)
    dist.all_reduce(layer)
    layer_ns = []
    for _ in range(REPS):
        t0 = time.perf_counter_ns()
        dist.all_reduce(layer)
        layer_ns.append(time.perf_counter_ns() - t0)
    out["layer_sync_ns"] = layer_ns
    dist.barrier()

    path = os.environ.get("ASYNC_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
