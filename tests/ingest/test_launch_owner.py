"""Which range owns an NCCL kernel: the innermost range holding its launch on the same thread,
also when the range that started last before the launch had already ended (a sibling)."""

from __future__ import annotations

import nsyscomm
from nsyscomm import nvtx_format
from nsyscomm.synth import LAUNCH_DRIVER, Report, write_sqlite

KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _msg(op, seq, pg=0):
    return nvtx_format.format_collective(
        op, api=op, bytes=4096, dtype="float32", numel=1024, pg=pg, gsize=1, seq=seq, caller=f"train.py:{seq} {op}"
    )


def _launch(rep, p, tid, at, start):
    call = rep.api_call(p, tid, at, at + 500, LAUNCH_DRIVER)
    rep.kernel(p, call["correlationId"], device=0, stream=7, start=start, end=start + 2000, name=KERNEL)


def test_outer_range_owns_a_launch_after_an_ended_inner_range(tmp_path):
    rep = Report("owner.sqlite")
    p = rep.process(100, "python3", threads={100: "main", 101: "side"})
    rep.mark(p, 100, 10, registered=nvtx_format.format_rank_marker(0, 0, 1, "h"), domain=1)
    t = 1_000_000
    # wrapper: all_reduce [t, t+10000] holds an ended broadcast [t+2000, t+3000], then the launch
    rep.range(p, 100, t, t + 10_000, registered=_msg("all_reduce", 0), domain=1)
    rep.range(p, 100, t + 2000, t + 3000, registered=_msg("broadcast", 0, pg=1), domain=1)
    _launch(rep, p, 100, t + 5000, t + 7000)
    # the same shape with PyTorch's ranges on another thread (no wrapper)
    t2 = t + 100_000
    rep.range(p, 101, t2, t2 + 10_000, text="nccl:all_reduce")
    rep.range(p, 101, t2 + 2000, t2 + 3000, text="nccl:broadcast")
    _launch(rep, p, 101, t2 + 5000, t2 + 7000)
    # and the plain case: the launch inside the range that started last
    t3 = t + 200_000
    rep.range(p, 100, t3, t3 + 10_000, registered=_msg("all_reduce", 1), domain=1)
    _launch(rep, p, 100, t3 + 5000, t3 + 7000)
    write_sqlite(rep, tmp_path / "owner.sqlite", seed=0)

    c = nsyscomm.load(tmp_path / "owner.sqlite", cache=False).collectives
    got = {(r.source, r.op, r.seq if r.source == "wrapper" else None): (r.gpu_start, r.kernels) for r in c.itertuples()}
    assert got[("wrapper", "all_reduce", 0)] == (t + 7000, 1)
    assert got[("wrapper", "broadcast", 0)][1] == 0  # CPU bookkeeping, no kernel
    assert got[("wrapper", "all_reduce", 1)] == (t3 + 7000, 1)
    torch = [r for r in c.itertuples() if r.source == "torch_range"]
    assert [(r.op, r.gpu_start, r.kernels) for r in torch] == [("all_reduce", t2 + 7000, 1)]
    assert not (c["source"] == "kernel_name").any()
