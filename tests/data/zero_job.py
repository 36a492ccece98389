"""A 2-rank gloo job: DDP with torch's ZeroRedundancyOptimizer, whose step broadcasts each rank's
updated shard of parameters to the other rank with async_op=True on one process group, then
waits for all of them. Rank LATE_RANK sleeps LATE_S (timed by the program) before the optimizer
step of step LATE_STEP. The program writes its own figures to $ZERO_JOB_OUT/rank<r>.json: each
step's time (from the forward's start to the optimizer step's return), each optimizer step's
time, the sleep, and a synchronous broadcast's time for each parameter size (REPS each).
The user code has no nsyscomm in it.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 256
LAYERS = 6
STEPS = 4
LATE_RANK = 0
LATE_STEP = 2
LATE_S = 0.3
REPS = 5


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.01)
    x = torch.randn(32, WIDTH)
    out = {"rank": rank, "late_rank": LATE_RANK, "late_step": LATE_STEP, "step_ns": [], "opt_ns": []}
    for step in range(STEPS):
        t0 = time.perf_counter_ns()
        ddp(x).sum().backward()
        if rank == LATE_RANK and step == LATE_STEP:
            s0 = time.perf_counter_ns()
            time.sleep(LATE_S)
            out["sleep_ns"] = time.perf_counter_ns() - s0
        o0 = time.perf_counter_ns()
        opt.step()
        opt.zero_grad()
        t1 = time.perf_counter_ns()
        out["opt_ns"].append(t1 - o0)
        out["step_ns"].append(t1 - t0)
    dist.barrier()
    sync = {}
    for n in sorted({p.numel() for p in model.parameters()}):
        b = torch.ones(n)
        dist.broadcast(b, src=0)
        times = []
        for _ in range(REPS):
            t0 = time.perf_counter_ns()
            dist.broadcast(b, src=0)
            times.append(time.perf_counter_ns() - t0)
        sync[str(4 * n)] = times
    out["sync_ns"] = sync
    path = os.environ.get("ZERO_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
