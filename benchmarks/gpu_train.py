"""A small real GPU job for benchmarks/gpu_check.sh: DDP over an MLP, then explicit NCCL
collectives of several sizes each step. Prints the loop's time per step (steps 5.. on).

Run it one rank per GPU (NCCL refuses two ranks on one GPU): under torchrun, or alone with
RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29511. STEPS (default 30) and WIDTH
(default 4096) size it.
"""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, ws = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
dev = torch.device("cuda")
width = int(os.environ.get("WIDTH", 4096))
model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(8)]).to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
x = torch.randn(256, width, device=dev)
steps = int(os.environ.get("STEPS", 30))
big = torch.randn(16 << 20, device=dev)  # 64 MB
mid = torch.randn(1 << 20, device=dev)  # 4 MB
small = torch.ones(8, device=dev)
gat = torch.empty(ws * (1 << 20), device=dev)
rs_in = torch.randn(ws * (1 << 20), device=dev)
rs_out = torch.empty(1 << 20, device=dev)
torch.cuda.synchronize()
t0 = time.perf_counter()
for step in range(steps):
    if step == 5:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    loss = ddp(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    dist.all_reduce(big)
    dist.broadcast(mid, 0)
    dist.all_gather_into_tensor(gat, mid)
    dist.reduce_scatter_tensor(rs_out, rs_in)
    for _ in range(20):
        dist.all_reduce(small)  # many small calls: the per-call cost of a wrapper shows here
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"RANK{rank} loop_ms_per_step {1000 * dt / max(1, steps - 5):.3f}", flush=True)
dist.barrier()
dist.destroy_process_group()
