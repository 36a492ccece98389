"""A 2-rank gloo job of the parallelisms torch builds on DTensor, with its own independent figures
(tests/capture/test_parallel_timing.py). The user code has no nsyscomm in it.

Phases, each separated by a barrier (the test splits each rank's calls at its barriers):
0. sync: the program times synchronous all_gather_into_tensor, reduce_scatter_tensor and
         all_reduce of each size the later phases use, REPS times each (the wire's time).
1. fsdp: FSDP2 (fully_shard per layer and at the root) training steps.
   Each step first prefetches both layers' all-gathers itself, asynchronously.
2. tp:   tensor parallel (parallelize_module: ColwiseParallel then RowwiseParallel) steps.
3. sp:   sequence parallel (SequenceParallel norm, ColwiseParallel from sequence shards,
         RowwiseParallel back to them) steps.
Each of phases 1-3 builds its model and trains it under torch's CommDebugMode, which counts the
collectives per op. One optimizer (a param group per phase) steps every model, so that its steps
number the job's steps; the program records when each of its optimizer steps returned.

The figures go to $PARALLEL_JOB_OUT/rank<r>.json; done.<rank> in $NSYSCOMM_TEST_DONE_DIR.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

WIDTH = 1024  # a Linear(WIDTH, WIDTH): a 4 MiB all_gather / reduce_scatter under FSDP2
HIDDEN = 2048
TOKENS = 1024  # TP: a (TOKENS, WIDTH) activation, all_reduced whole: 4 MiB
BATCH, SEQ = 4, 256  # SP: a (BATCH, SEQ, WIDTH) activation, gathered and scattered on SEQ: 4 MiB
STEPS = 5
REPS = 5


def timed_sync(out, world):
    """The wire's time of each size the phases send, synchronous calls the program times itself."""
    sizes = {"fsdp": WIDTH * WIDTH + WIDTH, "act": TOKENS * WIDTH}
    for n in sizes.values():
        full = torch.ones(n)
        shard = torch.ones(n // world)
        calls = {
            "all_gather": lambda: dist.all_gather_into_tensor(full, shard),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(shard, full),
            "all_reduce": lambda: dist.all_reduce(full),
        }
        for op, call in calls.items():
            call()  # warm-up: gloo's first call of a size sets up its buffers
            took = []
            for _ in range(REPS):
                t0 = time.perf_counter_ns()
                call()
                took.append(time.perf_counter_ns() - t0)
            out["sync_ns"][f"{op}:{4 * n}"] = took
            out["sync_counts"][op] = out["sync_counts"].get(op, 0) + 1 + REPS


def fsdp_model(mesh):
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.randn(64, WIDTH)


def tp_model(mesh):
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, WIDTH))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return model, torch.randn(TOKENS, WIDTH, requires_grad=True)


def sp_model(mesh):
    model = torch.nn.Sequential(
        torch.nn.LayerNorm(WIDTH), torch.nn.Linear(WIDTH, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, WIDTH)
    )
    plan = {
        "0": SequenceParallel(),
        "1": ColwiseParallel(input_layouts=Shard(1)),
        "3": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(model, mesh, plan)
    # this rank's sequence shard: SequenceParallel reads a plain tensor as Shard(1)
    return model, torch.randn(BATCH, SEQ // mesh.size(), WIDTH, requires_grad=True)


def loss_of(y):
    return (y.to_local() if hasattr(y, "to_local") else y).float().pow(2).mean()


def train(name, build, mesh, opt, out):
    """Build the phase's model and train it STEPS steps, counting its collectives with torch's
    CommDebugMode; record when each optimizer step returned."""
    counts = {}
    with CommDebugMode() as comm:  # distributing the parameters may communicate too
        model, x = build(mesh)
    add(counts, comm)
    opt.add_param_group({"params": [p for p in model.parameters() if p.requires_grad]})
    for _ in range(STEPS):
        # a mode per step: torch's CommDebugMode loses track of its modules in a second forward
        with CommDebugMode() as comm:
            if name == "fsdp":
                # explicit prefetch (FSDP2's public unshard): each layer's all-gather runs
                # asynchronously, and its forward waits for it (on gloo FSDP2's own all-gathers
                # and reduce-scatters are synchronous)
                for layer in (model[0], model[2]):
                    layer.unshard(async_op=True)
            loss_of(model(x)).backward()
            opt.step()
        out["step_end_ns"].append(time.perf_counter_ns())
        out["step_phase"].append(name)
        opt.zero_grad(set_to_none=True)
        add(counts, comm)
    out["comm_counts"][name] = counts


def add(counts, comm):
    """CommDebugMode's counts per op, by the op's short name (all_gather_into_tensor, ...)."""
    for op, n in comm.get_comm_counts().items():
        if n:
            key = str(op).split(".")[-1]
            counts[key] = counts.get(key, 0) + n


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    out = {"rank": rank, "sync_ns": {}, "comm_counts": {}, "step_end_ns": [], "step_phase": [], "sync_counts": {}}
    dist.barrier()
    timed_sync(out, world)
    dist.barrier()
    # an optimizer with a param group per phase (SGD needs one to start with: a bias-like dummy)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1e-3)
    for name, build in (("fsdp", fsdp_model), ("tp", tp_model), ("sp", sp_model)):
        train(name, build, mesh, opt, out)
        dist.barrier()
    out["barriers"] = 5  # the one before the sync phase, after it, after each training phase

    path = os.environ.get("PARALLEL_JOB_OUT")
    if path:
        with open(os.path.join(path, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
    done = os.environ.get("NSYSCOMM_TEST_DONE_DIR")
    if done:
        open(os.path.join(done, f"done.{rank}"), "w").close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
