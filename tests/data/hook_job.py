"""A 2-rank gloo job: DDP with a communication hook of its own that all_reduces each gradient
bucket with async_op=True and returns the work's future (as torch's allreduce_hook does), then
the same with torch's fp16_compress_hook. Rank LATE_RANK sleeps LATE_S (timed) before the
backward of step LATE_STEP of each phase. The program writes to $HOOK_JOB_OUT/rank<r>.json
each step's time, the sleep, each bucket's size (the hook sees it) and a synchronous all_reduce's
time for each bucket size, float32 and float16 (REPS each). The user code has no nsyscomm in it.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH = 512
LAYERS = 4
STEPS = 4
LATE_RANK = 1
LATE_STEP = 2
LATE_S = 0.3
REPS = 5

SEEN = set()


def async_allreduce_hook(state, bucket):
    t = bucket.buffer()
    SEEN.add((str(t.dtype), t.numel()))
    t.div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def fp16_hook(state, bucket):
    SEEN.add(("torch.float16", bucket.buffer().numel()))
    return default_hooks.fp16_compress_hook(state, bucket)


def phase(rank, hook, out, name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    ddp = DDP(model, bucket_cap_mb=1)
    ddp.register_comm_hook(None, hook)
    x = torch.randn(16, WIDTH)
    steps = []
    for step in range(STEPS):
        t0 = time.perf_counter_ns()
        loss = ddp(x).sum()
        if rank == LATE_RANK and step == LATE_STEP:
            s0 = time.perf_counter_ns()
            time.sleep(LATE_S)
            out[name + "_sleep_ns"] = time.perf_counter_ns() - s0
        loss.backward()
        steps.append(time.perf_counter_ns() - t0)
    out[name + "_step_ns"] = steps
    dist.barrier()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {"rank": rank, "late_rank": LATE_RANK, "late_step": LATE_STEP}
    phase(rank, async_allreduce_hook, out, "async")
    phase(rank, fp16_hook, out, "fp16")
    sync = {}
    for dtype, n in sorted(SEEN):
        b = torch.ones(n, dtype=getattr(torch, dtype.split(".")[1]))
        dist.all_reduce(b)
        times = []
        for _ in range(REPS):
            t0 = time.perf_counter_ns()
            dist.all_reduce(b)
            times.append(time.perf_counter_ns() - t0)
        sync[f"{dtype}:{b.element_size() * n}"] = times
    out["sync_ns"] = sync
    path = os.environ.get("HOOK_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
