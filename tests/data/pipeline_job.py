"""A 2-stage GPipe pipeline on 2 gloo ranks (torch.distributed.pipelining, tests/analyses/test_pipeline_job.py).
Stage 0 sleeps SLEEP_S in its forward of every micro-batch, so stage 1's receive of each
micro-batch's activations waits for it. No optimizer: the schedule's step() is the step boundary.
Rank 1 prints the period between its steps' ends (`period_ms <float>`), its own clock.

The user code has no nsyscomm in it."""
import time

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

STEPS = 5
MICRO = 2
SLEEP_S = 0.05


class Stage0(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        time.sleep(SLEEP_S)  # the slow stage: stage 1 waits this long for each micro-batch
        return self.lin(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    mod = Stage0() if rank == 0 else torch.nn.Linear(16, 4)
    stage = PipelineStage(mod, rank, 2, torch.device("cpu"))
    sched = ScheduleGPipe(stage, n_microbatches=MICRO, loss_fn=lambda out, tgt: out.sum())
    x = torch.randn(4 * MICRO, 16)
    ends = []
    for _ in range(STEPS):
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=torch.zeros(4 * MICRO, 4))
        ends.append(time.perf_counter())
    if rank == 1:
        for a, b in zip(ends, ends[1:]):
            print(f"period_ms {(b - a) * 1e3:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
