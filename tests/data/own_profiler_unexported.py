"""A gloo job whose own torch.profiler starts before init_process_group and whose traces it never
exports (it reads key_averages() instead): schedule(wait=1, warmup=1, active=1, repeat=2) over
8 iterations of one all_reduce, prof.step() after each, so two cycles of one recorded iteration.
Writes DONE/done<R>.json (the iterations the schedule itself says it records):
python own_profiler_unexported.py DONE."""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

done = sys.argv[1]
plan = schedule(wait=1, warmup=1, active=1, repeat=2)
recorded = [i for i in range(8) if plan(i) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
x = torch.ones(1000)
with profile(activities=[ProfilerActivity.CPU], schedule=plan) as prof:
    dist.init_process_group("gloo")
    for _ in range(8):
        dist.all_reduce(x)
        prof.step()
ops = len(prof.key_averages())
rank = dist.get_rank()
with open(os.path.join(done, f"done{rank}.json"), "w") as f:
    json.dump({"recorded": recorded, "ops": ops}, f)
# both ranks done before either tears gloo down: without it a rank sometimes aborts in its
# teardown (docs/capture.md, "A job that fails in its teardown")
dist.barrier()
dist.destroy_process_group()
