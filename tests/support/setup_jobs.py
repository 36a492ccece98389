"""Generated NCCL jobs with exactly known setup calls, copies and warm-up steps, for
tests/analyses/test_setup.py (ground truth by construction; nsyscomm.synth's writer, nsys schema).

A job is a list of steps; a step is a list of calls (op, bytes, in_place). Every rank runs every
call; the ranks' clocks stay equal, so nobody waits. Each call is the wrapper's range holding
NCCL's own range (ncclAllReduce, ...), and inside that:

- on a job of several ranks, the launch of one NCCL kernel (KERNEL_NS once every rank is in);
- on a one-rank job, no kernel: an out-of-place call copies locally (a cudaMemcpyAsync whose copy
  takes COPY_NS on NCCL's stream), an in-place one does nothing on the device;
- in the first call of each communicator, before that, NCCL's lazy initialization: INIT_NS of
  host time, marked by an ncclCommInitRankConfig range when `nccl_ranges` (NCCL >= 2.19), and
  holding copies of its own (on another stream) that are setup, not the call's transfer.

`slow_steps` adds host time before a step's first call (a warm-up step's allocator, autotuning);
without `wrapper`, NCCL's ranges are the only record of the calls.
"""

from __future__ import annotations

from pathlib import Path

from nsyscomm import nvtx_format, synth
from nsyscomm.synth.report import MEMCPY_ASYNC, NCCL_DOMAIN_ID

US = 1_000
MS = 1_000_000
T0 = 2_000_000_000
INIT_NS = 300 * MS  # NCCL's communicator initialization inside the first call
LAUNCH_NS = 20 * US  # host time of a call without its init
KERNEL_NS = 100 * US
COPY_NS = 7 * US
INIT_COPY_NS = 3 * US
GAP_NS = 200 * US  # host time between two calls
COMPUTE_NS = 900 * US  # one compute kernel per step (so the report has kernels, as a real one)
NCCL_STREAM, INIT_STREAM, COMPUTE_STREAM = 7, 13, 3
CALLER = "train.py:30 step"
NCCL_API = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather", "broadcast": "ncclBroadcast"}


def _compute(rep, procs, t: int) -> None:
    """A compute kernel on every rank's device, launched at t."""
    for r, p in enumerate(procs):
        api = rep.api_call(p, p.pid, t, t + 5 * US, synth.LAUNCH_RUNTIME)
        rep.kernel(
            p,
            api["correlationId"],
            device=r,
            stream=COMPUTE_STREAM,
            start=t + 10 * US,
            end=t + 10 * US + COMPUTE_NS,
            name="sm90_gemm",
        )


def write_job(
    path: Path,
    n_ranks: int,
    steps: list[list[tuple[str, int, bool]]],
    *,
    nccl_ranges: bool = True,
    slow_steps: dict[int, int] | None = None,
    wrapper: bool = True,
    late_ns: dict[int, int] | None = None,
    init_extra_ns: dict[int, int] | None = None,
) -> dict:
    """Write the job's report to path. Returns the truth: per call (rank, step, op, bytes,
    cpu_start, cpu_end, gpu_start, gpu_end), the setup call's (step, op, bytes, took_ns,
    init_ns), and each step's time (from the previous step's last end).

    At the first call, rank r arrives `late_ns[r]` late; NCCL's init is collective (its
    bootstrap waits for every rank), so every rank's init ends INIT_NS after the last one arrived,
    `init_extra_ns[r]` later on rank r (its own part of the init took that much longer)."""
    late_ns, init_extra_ns = late_ns or {}, init_extra_ns or {}
    rep = synth.Report(Path(path).name, cuda=True)
    procs = [rep.process(9000 + r, "python3", {9000 + r: "python3"}) for r in range(n_ranks)]
    for r, p in enumerate(procs):
        rep.domain_create(p, p.pid, T0 - 50 * US, nvtx_format.DOMAIN, 1)
        rep.domain_create(p, p.pid, T0 - 40 * US, "NCCL", NCCL_DOMAIN_ID)
        rep.mark(p, p.pid, T0 - 30 * US, registered=nvtx_format.format_rank_marker(r, r, n_ranks, "h"), domain=1)
    t = T0
    seq = 0
    calls, setup, step_ends, exec_starts = [], [], [], []
    for step, events in enumerate(steps):
        t += (slow_steps or {}).get(step, 0)
        _compute(rep, procs, t)  # a compute kernel on every rank's device
        t += 10 * US + COMPUTE_NS + GAP_NS
        for op, nbytes, in_place in events:
            first = seq == 0
            starts = [t + (late_ns.get(r, 0) if first else 0) for r in range(n_ranks)]
            # the init's range on each rank: from its arrival to INIT_NS after the last arrival
            init_ends = [max(starts) + 2 * US + INIT_NS - US + init_extra_ns.get(r, 0) for r in range(n_ranks)]
            launches = [e + 4 * US if first else s + 5 * US for s, e in zip(starts, init_ends)]
            gpu = None
            took = []
            for r, p in enumerate(procs):
                start, launch = starts[r], launches[r]
                cpu_end = launch + LAUNCH_NS
                msg = nvtx_format.format_collective(
                    op,
                    api=op,
                    bytes=nbytes,
                    dtype="float32",
                    numel=nbytes // 4,
                    pg=0,
                    gsize=n_ranks,
                    seq=seq,
                    step=step,
                    caller=CALLER,
                )
                if wrapper:
                    rep.range(p, p.pid, start, cpu_end, registered=msg, domain=1)
                if first:
                    if nccl_ranges:
                        rep.range(
                            p,
                            p.pid,
                            start + 2 * US,
                            init_ends[r],
                            text="ncclCommInitRankConfig",
                            domain=NCCL_DOMAIN_ID,
                        )
                    c = rep.api_call(p, p.pid, start + 10 * US, start + 12 * US, MEMCPY_ASYNC)
                    rep.memcpy(
                        p,
                        c["correlationId"],
                        device=r,
                        stream=INIT_STREAM,
                        start=start + 20 * US,
                        end=start + 20 * US + INIT_COPY_NS,
                        nbytes=4096,
                    )
                if nccl_ranges:
                    rep.range(p, p.pid, launch, cpu_end - US, text=NCCL_API[op], domain=NCCL_DOMAIN_ID)
                if n_ranks > 1:
                    api = rep.api_call(p, p.pid, launch + US, launch + 4 * US, synth.LAUNCH_RUNTIME)
                    kname = f"ncclDevKernel_{''.join(w.title() for w in op.split('_'))}_Sum_f32_RING_LL"
                    rep.kernel(
                        p,
                        api["correlationId"],
                        device=r,
                        stream=NCCL_STREAM,
                        start=launch + 10 * US,
                        end=max(launches) + 10 * US + KERNEL_NS,  # once every rank is in
                        name=kname,
                    )
                    gpu = (launch + 10 * US, max(launches) + 10 * US + KERNEL_NS)
                elif not in_place:
                    api = rep.api_call(p, p.pid, launch + US, launch + 3 * US, MEMCPY_ASYNC)
                    rep.memcpy(
                        p,
                        api["correlationId"],
                        device=r,
                        stream=NCCL_STREAM,
                        start=launch + 8 * US,
                        end=launch + 8 * US + COPY_NS,
                        nbytes=nbytes,
                    )
                    gpu = (launch + 8 * US, launch + 8 * US + COPY_NS)
                calls.append((r, step, op, nbytes, start, cpu_end) + (gpu or (None, None)))
                # the execution's start as the statistics read it: the device's, else the host's;
                # a call holding NCCL's init range starts where its kernel would have without it
                x = gpu[0] if gpu else start
                if first and nccl_ranges:
                    x = max(start, x - (init_ends[r] - start - 2 * US))
                exec_starts.append((step, x))
                took.append(max(cpu_end - start, (gpu[1] - gpu[0]) if gpu else 0))
            if first:
                init_ns = max(e - s - 2 * US for s, e in zip(starts, init_ends))
                setup.append({"step": step, "op": op, "bytes": nbytes, "took_ns": max(took), "init_ns": init_ns})
            seq += 1
            t = max(max(c[5] for c in calls[-n_ranks:]), gpu[1] if gpu else 0) + GAP_NS
        # a call's end as the statistics read it: its device's, else its host's
        step_ends.append(max(c[7] if c[7] is not None else c[5] for c in calls if c[1] == step))
    _compute(rep, procs, t)  # the job goes on after its last step: the capture did not end there
    synth.write_sqlite(rep, Path(path), seed=5)
    first_start = min(x for step, x in exec_starts if step == 0)
    step_ns = [step_ends[0] - first_start] + [b - a for a, b in zip(step_ends, step_ends[1:])]
    return {"calls": calls, "setup": setup, "step_ns": step_ns}
