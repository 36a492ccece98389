"""A small gloo "training" job that calls every collective family, for the real-nsys e2e test.

Run under torchrun (any world size >= 2; the test uses 4). Every rank writes what it did to
``$NSYSCOMM_EXPECT_DIR/rank<R>.json``: a list of {op, api, bytes} per annotated call (DDP's
reducer calls are listed separately because their count depends on DDP's bucketing). The
last rank is deliberately late: it sleeps TRAIN_LATE_S after each of its calls, so it arrives
last at the next one.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("TRAIN_STEPS", "2"))
LATE_S = float(os.environ.get("TRAIN_LATE_S", "0.02"))


def main():
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    late = n - 1
    did = []

    def ex(op, api, nbytes):
        did.append({"op": op, "api": api, "bytes": nbytes})
        if rank == late:
            time.sleep(LATE_S)  # the late rank arrives last at the next collective

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    evens = dist.new_group([r for r in range(n) if r % 2 == 0])
    odds = dist.new_group([r for r in range(n) if r % 2 == 1])
    import torch.distributed._functional_collectives as funcol

    f4 = 4  # float32 bytes
    for step in range(STEPS):
        if rank == late:
            time.sleep(LATE_S)
        # all_reduce, sync and async
        t = torch.full((1024,), float(rank))
        dist.all_reduce(t); ex("all_reduce", "all_reduce", 1024 * f4)
        dist.all_reduce(t, async_op=True).wait(); ex("all_reduce", "all_reduce", 1024 * f4)
        # broadcast, reduce
        b = torch.arange(512, dtype=torch.float32)
        dist.broadcast(b, src=0); ex("broadcast", "broadcast", 512 * f4)
        dist.reduce(b, dst=0); ex("reduce", "reduce", 512 * f4)
        # all_gather (list and single tensor)
        x = torch.full((256,), float(rank))
        outs = [torch.empty(256) for _ in range(n)]
        dist.all_gather(outs, x); ex("all_gather", "all_gather", n * 256 * f4)
        big = torch.empty(n * 256)
        dist.all_gather_into_tensor(big, x); ex("all_gather", "all_gather_into_tensor", n * 256 * f4)
        dist.all_gather_single(big, x); ex("all_gather", "all_gather_single", n * 256 * f4)
        # reduce_scatter (list and single tensor)
        inp = [torch.ones(128) for _ in range(n)]
        o = torch.empty(128)
        dist.reduce_scatter(o, inp); ex("reduce_scatter", "reduce_scatter", n * 128 * f4)
        dist.reduce_scatter_tensor(o, torch.ones(n * 128)); ex("reduce_scatter", "reduce_scatter_tensor", n * 128 * f4)
        # all_to_all (list and single)
        a_in = [torch.full((64,), float(rank)) for _ in range(n)]
        a_out = [torch.empty(64) for _ in range(n)]
        dist.all_to_all(a_out, a_in); ex("all_to_all", "all_to_all", n * 64 * f4)
        s_out = torch.empty(n * 64)
        dist.all_to_all_single(s_out, torch.ones(n * 64)); ex("all_to_all", "all_to_all_single", n * 64 * f4)
        # gather, scatter
        g = torch.ones(32)
        dist.gather(g, [torch.empty(32) for _ in range(n)] if rank == 0 else None, dst=0)
        ex("gather", "gather", n * 32 * f4)
        dist.scatter(g, [torch.ones(32) for _ in range(n)] if rank == 0 else None, src=0)
        ex("scatter", "scatter", n * 32 * f4)
        # point to point: a ring with isend/irecv, then send/recv pairs, then batch_isend_irecv
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        p = torch.full((100,), float(rank))
        q = torch.empty(100)
        reqs = [dist.isend(p, nxt), dist.irecv(q, prv)]
        for r in reqs:
            r.wait()
        ex("send", "isend", 400); ex("recv", "irecv", 400)
        if rank % 2 == 0 and rank + 1 < n:
            dist.send(p, rank + 1); ex("send", "send", 400)
        elif rank % 2 == 1:
            dist.recv(q, rank - 1); ex("recv", "recv", 400)
        ops = [dist.P2POp(dist.isend, p, nxt), dist.P2POp(dist.irecv, q, prv)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        ex("send", "batch_isend_irecv", 400); ex("recv", "batch_isend_irecv", 400)
        # coalesced
        cs = [torch.ones(10), torch.ones(20)]
        dist.all_reduce_coalesced(cs); ex("all_reduce", "all_reduce_coalesced", 30 * f4)
        # object collectives (size unknown before pickling: bytes empty)
        objs = [{"step": step}, rank]
        dist.broadcast_object_list(objs, src=0); ex("broadcast", "broadcast_object_list", None)
        got = [None] * n
        dist.all_gather_object(got, {"r": rank}); ex("all_gather", "all_gather_object", None)
        # subgroups
        sub = evens if rank % 2 == 0 else odds
        st = torch.ones(300)
        dist.all_reduce(st, group=sub); ex("all_reduce", "all_reduce", 300 * f4)
        # functional collective
        fr = funcol.all_reduce(torch.ones(200), "sum", dist.group.WORLD)
        fr = fr.wait() if hasattr(fr, "wait") else fr
        ex("all_reduce", "funcol.all_reduce", 200 * f4)
        # barrier
        dist.barrier(); ex("barrier", "barrier", 0)
        # DDP step (gradient all-reduce by the C++ reducer)
        opt.zero_grad()
        ddp(torch.randn(8, 32)).sum().backward()
        opt.step()

    dist.barrier(); ex("barrier", "barrier", 0)
    out = os.environ.get("NSYSCOMM_EXPECT_DIR")
    if out:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
            json.dump({"rank": rank, "world": n, "steps": STEPS, "calls": did, "ddp_param_bytes": param_bytes,
                       "late_rank": late}, fh)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
