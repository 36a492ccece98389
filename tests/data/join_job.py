"""A 2-rank gloo job with uneven inputs under torch.distributed.algorithms.Join: DDP over a small
MLP and a ZeroRedundancyOptimizer, rank 1 given FEWER fewer batches than rank 0. Once rank 1 runs
out it joins: inside Join's exit it shadows rank 0's collectives (DDP's join hook all_reduces per
bucket, Join's count of ranks not yet joined, ZeRO's broadcasts) until rank 0 joins too.

Each rank prints the step at which it joined (the batches it ran: steps are the optimizer's,
counted from 0) and, before training, its own compute per step: forward, backward and an SGD
update on a local copy of the model, with no communication, the median of a few runs (the update
by hand: nsyscomm counts steps by the first torch optimizer that steps, which must be the job's).
With NSYSCOMM_TEST_DONE_DIR set, it writes both there (joined.R, compute.R: ms) and done.R."""

import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

BATCHES = 8
FEWER = 4  # rank 1 runs BATCHES - FEWER batches


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))


def compute_ms(x: torch.Tensor) -> float:
    """This rank's compute per step without communication: a local copy, median of 5 runs."""
    m = model()
    took = []
    for _ in range(6):
        t0 = time.perf_counter()
        m(x).sum().backward()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        took.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(took[1:])


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    x = torch.randn(256, 512)
    own_ms = compute_ms(x)
    print(f"rank {rank}: compute {own_ms:.3f} ms per step", flush=True)
    net = DDP(model())
    opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.SGD, lr=0.01)
    batches = BATCHES - FEWER * rank
    with Join([net, opt]):
        for _ in range(batches):
            net(x).sum().backward()
            opt.step()
            opt.zero_grad()
        print(f"rank {rank}: joined at step {batches}", flush=True)
    dist.barrier()
    done = os.environ.get("NSYSCOMM_TEST_DONE_DIR")
    if done:
        for name, value in (("joined", batches), ("compute", own_ms)):
            with open(os.path.join(done, f"{name}.{rank}"), "w") as f:
                f.write(f"{value}\n")
        open(os.path.join(done, f"done.{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
