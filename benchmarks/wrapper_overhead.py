"""Per-call overhead of nsyscomm's collective wrapper, no profiler attached.

    python benchmarks/wrapper_overhead.py [--calls 20000] [--rounds 15]

First the wrapper itself: the real wrapper around a no-op with all_reduce's signature (message,
caller walk, NVTX push/pop, autograd-key guard), minus the bare no-op call; min and median over
rounds; with the C fast path built, its Python fallback is measured in the same rounds, and a
fixed Python loop per round shows how fast the (shared) machine ran. The wrapper is measured
without and with the flight record (nsyscomm.capture.flight_record: its C ring, and its Python
fallback), as `nsyscomm run` writes it into NSYSCOMM_RECORD_DIR. Then a real 16-element float32 gloo all_reduce (world size 1, TCPStore on 127.0.0.1):
bare, wrapped, and a control (bare after a Python busy loop as long as the wrapper), in rounds of
random order, so gloo's drift and its thread hand-off effects hit every arm alike.
DeepSpeed's comms logger (prof_all) is measured too when deepspeed imports: its timed_op decorator
around the same no-op, and deepspeed.comm.all_reduce as a gloo arm. Last, the same all_reduce with
async_op=True and wait(), bare and wrapped: what an asynchronous call costs with its completion hook.
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

    from nsyscomm.capture import python_layer
    from nsyscomm.capture import wrapper as W

    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    t = torch.ones(16)
    bare_fn = dist.all_reduce
    W.annotate(True)
    wrapped_fn = dist.all_reduce
    assert wrapped_fn is not bare_fn
    W.annotate(False)  # bare rounds run with annotation off (else the dispatcher layer sees bare calls)
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch {torch.__version__}, emitter {W._emitter_kind}, profiler attached: "
        f"{bool(os.environ.get('NVTX_INJECTION64_PATH'))}"
    )

    # 1. the wrapper itself, around a no-op with all_reduce's signature (caller walk, message,
    # push/pop and autograd-key guard included; no gloo noise). min over rounds = the cost on a
    # quiet core; the median shows what a busy 2-core VM adds
    def noop(tensor, op=None, group=None, async_op=False):
        return None

    ds_comm, ds_timed, ds_why = _deepspeed()
    W.annotate(True)
    wn = python_layer.make_wrapper(noop, "all_reduce", "all_reduce", "t", 0, "tensor", 2, "group", 3)
    arms = {"wrapper": wn}
    if getattr(wn, "_slow", None) is not None:  # the C fast path is built: its Python fallback too
        arms["Python wrapper (no C fast path)"] = wn._slow
    if ds_timed is not None:  # DeepSpeed's comms logger decorator around the same no-op

        def all_reduce(tensor, op=None, group=None, async_op=False):  # the logger keys on __name__
            return None

        arms["DeepSpeed comms logger"] = ds_timed(all_reduce)
    emitters = _ring_emitters(W)  # arm suffix -> (push, pop): no record, C ring, Python ring
    iso = {k + (s if k == "wrapper" else ""): [] for k in arms for s in (emitters if k == "wrapper" else [""])}
    gauge = []
    for _ in range(a.rounds):
        base = _per_call(lambda: noop(t), a.calls)
        for k, fn in arms.items():
            if k.startswith("DeepSpeed"):
                _deepspeed_reset()
            for suffix, (push, pop) in emitters.items() if k == "wrapper" else [("", (W._push, W._pop))]:
                saved = W._push, W._pop
                W._push, W._pop = push, pop
                iso[k + suffix].append(_per_call(lambda fn=fn: fn(t), a.calls) - base)
                W._push, W._pop = saved
        # the VM's speed this round: a fixed pure-Python loop (it varies by 1.5x on a shared VM)
        gauge.append(_per_call(lambda: _spin(60), a.calls))
    W.annotate(False)
    path = (
        "C fast path, guard in C"
        if W._fast_guard
        else "C fast path, Python guard"
        if "Python wrapper (no C fast path)" in arms
        else "Python (nsyscomm.capture._fastpath not built)"
    )
    print(f"wrapper alone (around a no-op), {a.rounds} rounds x {a.calls} calls; {path}")
    for k, v in iso.items():
        print(f"  {k:32s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us  p90 {_q(v, 0.9):7.2f} us")
    print(
        f"  {'speed gauge: 60-step Python loop':32s} min {min(gauge):7.2f} us  median {statistics.median(gauge):7.2f} us  "
        f"p90 {_q(gauge, 0.9):7.2f} us"
    )
    iso = iso["wrapper"]
    _ring_alone(a)

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

    arms = {
        "bare": (False, lambda: dist.all_reduce(t)),
        "wrapped": (True, lambda: dist.all_reduce(t)),
        "control": (False, control),
    }
    if ds_comm is not None:
        arms["deepspeed"] = (False, lambda: ds_comm.all_reduce(t))
    per = {k: [] for k in arms}
    rng = random.Random(0)
    for _ in range(a.rounds):
        order = list(arms)
        rng.shuffle(order)
        for k in order:
            if k == "deepspeed":
                _deepspeed_reset()
            W.annotate(arms[k][0])
            per[k].append(_per_call(arms[k][1], a.calls))
        W.annotate(False)
    print(f"gloo all_reduce 16 x float32, world size 1, {a.rounds} rounds x {a.calls} calls")
    for k, label in (
        ("bare", "bare call"),
        ("wrapped", "wrapped call"),
        ("control", f"bare + {min(iso):.1f} us busy loop"),
        ("deepspeed", "DeepSpeed comms logger"),
    ):
        if k not in per:
            continue
        v = per[k]
        print(f"  {label:28s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us  p90 {_q(v, 0.9):7.2f} us")
    print(
        f"  wrapped - bare: min {min(per['wrapped']) - min(per['bare']):5.2f} us, median "
        f"{statistics.median(per['wrapped']) - statistics.median(per['bare']):5.2f} us; "
        f"control - bare: median {statistics.median(per['control']) - statistics.median(per['bare']):5.2f} us"
    )

    if ds_comm is None:
        print(f"  DeepSpeed comms logger: not measured ({ds_why})")
    _async_arms(a, dist, W, t)


def _async_arms(a, dist, W, t) -> None:
    """3. an asynchronous all_reduce (async_op=True, then wait()), bare and wrapped, in rounds of
    random order: wrapped - bare is what an asynchronous call costs, the completion hook (a
    callback on the Work's future, its mark on gloo's thread, the wait range) included."""
    calls = max(1, a.calls // 4)
    arms = {"bare": False, "wrapped": True}
    per: dict[str, list[float]] = {k: [] for k in arms}
    rng = random.Random(1)
    for _ in range(a.rounds):
        order = list(arms)
        rng.shuffle(order)
        for k in order:
            W.annotate(arms[k])
            per[k].append(_per_call(lambda: dist.all_reduce(t, async_op=True).wait(), calls))
        W.annotate(False)
    print(f"gloo all_reduce 16 x float32, async_op=True then wait(), {a.rounds} rounds x {calls} calls")
    for k, v in per.items():
        print(
            f"  {k + ' call':28s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us  p90 {_q(v, 0.9):7.2f} us"
        )
    print(
        f"  wrapped - bare: min {min(per['wrapped']) - min(per['bare']):5.2f} us, median "
        f"{statistics.median(per['wrapped']) - statistics.median(per['bare']):5.2f} us"
    )


def _ring_emitters(W) -> dict:
    """The wrapper's NVTX push/pop as bound, and chained with the flight record's ring (a
    temporary file): C when built, and the Python fallback."""
    import tempfile
    from pathlib import Path

    from nsyscomm.capture import flight_record as FR

    out = {"": (W._push, W._pop)}
    d = Path(tempfile.mkdtemp(prefix="nsyscomm-bench-"))
    if FR._flightring is not None:
        FR._flightring.configure(FR.open_ring(d / "c.ring", rank=0), W._push, W._pop)
        out[" + flight record (C)"] = (FR._flightring.push, FR._flightring.pop)
    out[" + flight record (Python)"] = FR._py_chain(W._push, W._pop, FR.open_ring(d / "py.ring", rank=0))[:2]
    return out


def _ring_alone(a) -> None:
    """The flight record's own cost: push(msg) + pop() chained to no-op emitters, against the
    no-op emitters alone (the wrapper arms above carry the machine's noise; this does not)."""
    import tempfile
    from pathlib import Path

    from nsyscomm import nvtx_format
    from nsyscomm.capture import flight_record as FR

    msg = nvtx_format.format_collective(
        "all_reduce",
        api="all_reduce",
        bytes=64,
        dtype="float32",
        numel=16,
        pg=0,
        gsize=4,
        seq=17,
        caller="train.py:88 train_step",
    )

    def push(m):
        return None

    def pop():
        return None

    d = Path(tempfile.mkdtemp(prefix="nsyscomm-bench-"))
    arms = {"no record": (push, pop)}
    if FR._flightring is not None:
        FR._flightring.configure(FR.open_ring(d / "c.ring", rank=0), push, pop)
        arms["C ring"] = (FR._flightring.push, FR._flightring.pop)
    arms["Python ring"] = FR._py_chain(push, pop, FR.open_ring(d / "py.ring", rank=0))[:2]
    per = {k: [] for k in arms}
    for _ in range(a.rounds):
        for k, (pu, po) in arms.items():
            t0 = time.perf_counter_ns()
            for _ in range(a.calls):
                pu(msg)
                po()
            per[k].append((time.perf_counter_ns() - t0) / a.calls / 1000.0)
    print(f"flight record alone (push + pop around no-op emitters), {a.rounds} rounds x {a.calls} calls")
    for k, v in per.items():
        extra = (
            ""
            if k == "no record"
            else (
                f"  adds min {min(v) - min(per['no record']):5.2f} us, median "
                f"{statistics.median(v) - statistics.median(per['no record']):5.2f} us"
            )
        )
        print(f"  {k:32s} min {min(v):7.2f} us  median {statistics.median(v):7.2f} us{extra}")


def _deepspeed_reset():
    """Forget what DeepSpeed's logger recorded: each of its timed calls sums every latency its
    timer has recorded since the last reset (O(calls) per call), so rounds start alike."""
    from deepspeed.comm import comm as ds

    ds.comms_logger.comms_dict.clear()
    ds.timers.timers.clear()


def _deepspeed():
    """(deepspeed.comm, its timed_op decorator, None) with the comms logger on for every op, or
    (None, None, why). deepspeed installs on CPU with: pip install --no-build-isolation deepspeed"""
    try:
        import deepspeed  # noqa: F401
        from deepspeed import comm as ds_comm
        from deepspeed.comm.comm import timed_op
    except Exception as e:
        return None, None, f"deepspeed does not import here: {type(e).__name__}: {e}"
    try:
        ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
        ds_comm.configure(enabled=True, prof_all=True, verbose=False)
    except Exception as e:
        return None, None, f"{type(e).__name__}: {e}"
    return ds_comm, timed_op, None


if __name__ == "__main__":
    main()
