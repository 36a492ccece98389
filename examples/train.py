"""A small data-parallel training job to try nsyscomm on, with nothing of nsyscomm in it:

    nsyscomm run -- torchrun --standalone --nproc-per-node=2 examples/train.py --steps 20 --seed 0

Each rank trains the same small model on its own random batches; DistributedDataParallel (DDP)
averages the gradients across the ranks during backward(), one all_reduce per gradient bucket,
and the weights start equal on every rank because DDP broadcasts rank 0's. With a GPU per rank
(CUDA) it uses NCCL; without one, gloo on the CPU, where a 2-rank run takes a few seconds.

--sleep-ms makes the last rank late before every backward(): a straggler of known size, for
nsyscomm to find (the other ranks wait that long in the all_reduce), or for `nsyscomm gate` to
fail against a baseline of the same job without it.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the batches (default 0)")
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="the last rank sleeps this long before each backward")
    ap.add_argument("--backend", choices=["nccl", "gloo"], help="default: nccl with CUDA, else gloo")
    return ap.parse_args()


def main():
    args = parse_args()
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend)  # torchrun gives each rank its RANK, WORLD_SIZE and rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    torch.manual_seed(args.seed)
    # small on purpose: a step's compute is short, so the ranks reach each all_reduce together and
    # two runs of the same code wait alike (what a gate against a one-run baseline needs)
    model = torch.nn.Linear(256, 256).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own batches

    for step in range(args.steps):
        x = torch.randn(32, 256, generator=data).to(device)
        target = torch.randn(32, 256, generator=data).to(device)
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        if args.sleep_ms and rank == world - 1:
            time.sleep(args.sleep_ms / 1000)  # the straggler: the others wait in the all_reduce
        loss.backward()  # DDP's all_reduce of the gradients
        opt.step()
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)

    # every rank done before any tears the process group down (a rank that leaves early can
    # make another fail in its last collective)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
