"""The README's `train.py` in tests/cli/test_readme.py: a short 2-rank gloo training loop (CPU only,
no CUDA), run as the README's CI examples run theirs, `torchrun ... train.py --steps 20`.

--sleep-ms adds a host stall before every step's all_reduce on the last rank: the regression the
gate must catch. --comm-sleep-ms makes every collective slower on every rank, by a sleep inside
the call (in the process group's own method, which the profiled call encloses): a communication
slowdown of known size (benchmarks/gate_noise.py). The user code has no nsyscomm in it.
"""
import argparse
import time

import torch
import torch.distributed as dist


def slow_down(seconds):
    """Every broadcast and all_reduce sleeps `seconds` inside the call, on every rank."""
    pg = dist.ProcessGroup
    for name in ("allreduce", "broadcast"):
        orig = getattr(pg, name)

        def slow(self, *a, _orig=orig, **k):
            time.sleep(seconds)
            return _orig(self, *a, **k)

        setattr(pg, name, slow)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--comm-sleep-ms", type=float, default=0.0)
    args = ap.parse_args()
    if args.comm_sleep_ms:
        slow_down(args.comm_sleep_ms / 1000)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(256, 256)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    for _ in range(args.steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        if args.sleep_ms and rank == world - 1:
            time.sleep(args.sleep_ms / 1000)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    # both ranks done before either tears gloo down (docs/capture.md, "A job that fails in its teardown")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
