"""A 2-rank gloo job profiled by torch.profiler with a schedule, as users profile a window of
training: 5 iterations of 3 collectives (all_reduce, an async all_reduce waited on, broadcast),
prof.step() after each; schedule(wait=1, warmup=1, active=2) records iterations 2 and 3. Writes
TRACES/rank<R>.json (the profiler's trace) and DONE/done<R>.json (the iterations the schedule
itself says it recorded): python scheduled_profile.py TRACES DONE."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

out, done = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank = dist.get_rank()
plan = schedule(wait=1, warmup=1, active=2)
recorded = [i for i in range(5) if plan(i) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]


def ready(p):
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))


x = torch.ones(1000)
with profile(activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=ready) as prof:
    for _ in range(5):
        dist.all_reduce(x)
        dist.all_reduce(x, async_op=True).wait()
        dist.broadcast(x, 0)
        prof.step()
with open(os.path.join(done, f"done{rank}.json"), "w") as f:
    json.dump({"recorded": recorded}, f)
# both ranks done before either tears gloo down: without it a rank sometimes aborts in its
# teardown (docs/capture.md, "A job that fails in its teardown")
dist.barrier()
dist.destroy_process_group()
