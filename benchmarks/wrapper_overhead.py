"""Per-call overhead of nsyscomm's collective wrapper, no profiler attached.

    python benchmarks/wrapper_overhead.py [--calls 20000] [--rounds 15]

gloo, world size 1 (TCPStore on 127.0.0.1), a 16-element float32 all_reduce. Bare and wrapped
calls are timed in alternating rounds (so drift in gloo's own latency hits both), and the
overhead is wrapped - bare per call, median / p90 over rounds. A second measurement isolates
the wrapper itself: the same wrapper around a no-op collective (no gloo noise at all).
DeepSpeed's comms logger is measured too when deepspeed imports on this machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _per_call(fn, calls):
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls / 1000.0


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

    for _ in range(2000):
        bare_fn(t)
    bare, wrapped, diff = [], [], []
    for _ in range(a.rounds):
        b = _per_call(lambda: dist.all_reduce(t), a.calls)
        W.annotate(True)
        w = _per_call(lambda: dist.all_reduce(t), a.calls)
        W.annotate(False)
        bare.append(b)
        wrapped.append(w)
        diff.append(w - b)
    print(f"all_reduce 16 x float32, {a.rounds} rounds x {a.calls} calls")
    print(f"  bare call            median {statistics.median(bare):7.2f} us  p90 {_q(bare, .9):7.2f} us")
    print(f"  wrapped call         median {statistics.median(wrapped):7.2f} us  p90 {_q(wrapped, .9):7.2f} us")
    print(f"  overhead (w - b)     median {statistics.median(diff):7.2f} us  p90 {_q(diff, .9):7.2f} us")

    # the wrapper alone, around a no-op with all_reduce's signature (caller walk and message included)
    def noop(tensor, op=None, group=None, async_op=False):
        return None

    W.annotate(True)
    wn = W._make_wrapper(noop, "all_reduce", "all_reduce", "t", 0, "tensor", 2, "group", 3)
    iso = []
    for _ in range(a.rounds):
        iso.append(_per_call(lambda: wn(t), a.calls) - _per_call(lambda: noop(t), a.calls))
    print(f"  wrapper alone        median {statistics.median(iso):7.2f} us  p90 {_q(iso, .9):7.2f} us"
          "  (message + caller + push/pop + autograd-key guard)")
    W.annotate(False)

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
