"""Per-call overhead of nsyscomm's collective wrapper, no profiler attached.

    python benchmarks/wrapper_overhead.py [--calls 20000] [--rounds 15]

First the wrapper itself: the real wrapper around a no-op with all_reduce's signature (message,
caller walk, NVTX push/pop, autograd-key guard), minus the bare no-op call; min and median over
rounds; with the C fast path built, its Python fallback is measured in the same rounds, and a
fixed Python loop per round shows how fast the (shared) machine ran. Then a real 16-element float32 gloo all_reduce (world size 1, TCPStore on 127.0.0.1):
bare, wrapped, and a control (bare after a Python busy loop as long as the wrapper), in rounds of
random order, so gloo's drift and its thread hand-off effects hit every arm alike.
DeepSpeed's comms logger is measured too when deepspeed imports on this machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _per_call(fn, calls):
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls / 1000.0


def _spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def _q(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    from nsyscomm.capture import wrapper as W

    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    t = torch.ones(16)
    bare_fn = dist.all_reduce
    W.annotate(True)
    wrapped_fn = dist.all_reduce
    assert wrapped_fn is not bare_fn
    W.annotate(False)   # bare rounds run with annotation off (else the dispatcher layer sees bare calls)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch {torch.__version__}, emitter {W._emitter_kind}, profiler attached: "
          f"{bool(os.environ.get('NVTX_INJECTION64_PATH'))}")

    # 1. the wrapper itself, around a no-op with all_reduce's signature (caller walk, message,
    # push/pop and autograd-key guard included; no gloo noise). min over rounds = the cost on a
    # quiet core; the median shows what a busy 2-core VM adds
    def noop(tensor, op=None, group=None, async_op=False):
        return None

    W.annotate(True)
    wn = W._make_wrapper(noop, "all_reduce", "all_reduce", "t", 0, "tensor", 2, "group", 3)
    arms = {"wrapper": wn}
    if getattr(wn, "_slow", None) is not None:   # the C fast path is built: its Python fallback too
        arms["Python wrapper (no C fast path)"] = wn._slow
    iso = {k: [] for k in arms}
    gauge = []
    for _ in range(a.rounds):
        base = _per_call(lambda: noop(t), a.calls)
        for k, fn in arms.items():
            iso[k].append(_per_call(lambda: fn(t), a.calls) - base)
        # the VM's speed this round: a fixed pure-Python loop (it varies by 1.5x on a shared VM)
        gauge.append(_per_call(lambda: _spin(60), a.calls))
    W.annotate(False)
    path = "C fast path, guard in C" if W._fast_guard else "C fast path, Python guard" if "Python wrapper (no C fast path)" in arms \
        else "Python (nsyscomm.capture._fastpath not built)"
    print(f"wrapper alone (around a no-op), {a.rounds} rounds x {a.calls} calls; {path}")
    for k, v in iso.items():
        print(f"  {k:32s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us  p90 {_q(v, .9):7.2f} us")
    print(f"  {'speed gauge: 60-step Python loop':32s} min {min(gauge):7.2f} us  median {statistics.median(gauge):7.2f} us  "
          f"p90 {_q(gauge, .9):7.2f} us")
    iso = iso["wrapper"]

    # 2. a real gloo all_reduce: bare, wrapped, and bare after a Python busy loop as long as the
    # wrapper (the control), in rounds of random order. On a 2-core VM any extra Python work between
    # tight-loop calls also shifts gloo's worker-thread hand-off (it has gone to sleep by the next
    # call), so the control shows how much of wrapped - bare any few microseconds of work would add
    spins = max(1, int(100 * min(iso) / max(_per_call(lambda: _spin(100), a.calls), 1e-3)))
    for _ in range(2000):
        bare_fn(t)

    def control():
        _spin(spins)
        dist.all_reduce(t)

    arms = {"bare": (False, lambda: dist.all_reduce(t)), "wrapped": (True, lambda: dist.all_reduce(t)),
            "control": (False, control)}
    per = {k: [] for k in arms}
    rng = random.Random(0)
    for _ in range(a.rounds):
        order = list(arms)
        rng.shuffle(order)
        for k in order:
            W.annotate(arms[k][0])
            per[k].append(_per_call(arms[k][1], a.calls))
        W.annotate(False)
    print(f"gloo all_reduce 16 x float32, world size 1, {a.rounds} rounds x {a.calls} calls")
    for k, label in (("bare", "bare call"), ("wrapped", "wrapped call"),
                     ("control", f"bare + {min(iso):.1f} us busy loop")):
        v = per[k]
        print(f"  {label:28s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us  p90 {_q(v, .9):7.2f} us")
    print(f"  wrapped - bare: min {min(per['wrapped']) - min(per['bare']):5.2f} us, median "
          f"{statistics.median(per['wrapped']) - statistics.median(per['bare']):5.2f} us; "
          f"control - bare: median {statistics.median(per['control']) - statistics.median(per['bare']):5.2f} us")

    try:
        import deepspeed  # noqa: F401
        from deepspeed import comm as ds_comm
    except Exception as e:
        print(f"  DeepSpeed comms logger: not measured (deepspeed does not import here: {type(e).__name__}: {e})")
        return
    try:
        ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        ds_comm.configure(enabled=True, prof_all=True, verbose=False)
        ds = [_per_call(lambda: ds_comm.all_reduce(t), a.calls) for _ in range(a.rounds)]
        W.annotate(False)
        b2 = [_per_call(lambda: bare_fn(t), a.calls) for _ in range(a.rounds)]
        d = [x - y for x, y in zip(ds, b2)]
        print(f"  DeepSpeed comms logger overhead median {statistics.median(d):7.2f} us  p90 {_q(d, .9):7.2f} us")
    except Exception as e:
        print(f"  DeepSpeed comms logger: not measured ({type(e).__name__}: {e})")


if __name__ == "__main__":
    main()
