"""A 4-rank gloo job on a 2x2 DeviceMesh with p2p (isend/irecv) and all_to_all_single, ending
the way many training scripts do: destroy_process_group() right after the last op, no barrier.
Used by benchmarks/teardown_abort.py (one rank sometimes aborted at teardown under
`nsyscomm run`)."""

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def job(rank: int | None = None, store: str | None = None) -> None:
    if store is None:  # under torchrun
        dist.init_process_group("gloo")
    else:  # under mp.spawn
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp = mesh.get_group("tp")
    dp = mesh.get_group("dp")
    for step in range(3):
        x = torch.full((1024,), float(rank + step))
        dist.all_reduce(x, group=dp)
        out = torch.empty(1024)
        dist.all_to_all_single(out, x, group=tp)
        peer = rank ^ 1  # the other rank of this tp pair
        buf = torch.empty(256)
        if rank % 2 == 0:
            reqs = [dist.isend(x[:256].contiguous(), peer), dist.irecv(buf, peer)]
        else:
            reqs = [dist.irecv(buf, peer), dist.isend(x[:256].contiguous(), peer)]
        for r in reqs:
            r.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1:  # python mesh_teardown_job.py STORE_FILE: 4 processes by mp.spawn
        import torch.multiprocessing as mp

        mp.spawn(job, args=(sys.argv[1],), nprocs=4, join=True)
    else:  # torchrun --standalone --nproc-per-node 4 benchmarks/mesh_teardown_job.py
        job()
