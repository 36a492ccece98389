"""PyTorch profiler traces whose collectives carry PyTorch's ``Seq`` and ``Comms Id``: matched
across ranks by them, exactly, where the traces' windows differ (one rank's trace holds a call
the other's does not), which matching by order gets wrong; by order where they are absent."""

from __future__ import annotations

import json
from pathlib import Path

import nsyscomm


def _x(name, cat, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace(rank: int, seqs: list[int], *, seq: bool = True, group: bool = True, comms_id: bool = False) -> dict:
    """One rank's all_reduces of group "0": the n-th of seqs moves 1000 x (seq + 1) floats, so a
    wrong match pairs calls of different sizes."""
    pid = 5000 + rank
    ev = []
    for i, s in enumerate(seqs):
        t = 1_000_000.0 + 1000.0 * i + 7.0 * rank
        n = 1000 * (s + 1)
        meta = {
            "Collective name": "allreduce",
            "In msg nelems": n,
            "Out msg nelems": n,
            "Group size": 2,
            "dtype": "Float",
        }
        if group:
            meta["Process Group Name"] = "0"
        if seq:
            meta["Seq"] = s
        if comms_id:
            meta["Comms Id"] = str(9_000_000_000_000_000_000 + s)  # a hash: past int64 as PyTorch's size_t may be
        ev.append(_x("record_param_comms", "cpu_op", t, 50.0, pid, pid, **meta))
        ev.append(_x("nccl:all_reduce", "user_annotation", t + 1.0, 40.0, pid, pid))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 10.0, 5.0, pid, pid, correlation=10 + i))
        ev.append(
            _x(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "kernel",
                t + 20.0,
                30.0,
                rank,
                7,
                device=rank,
                stream=7,
                correlation=10 + i,
            )
        )
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": ev,
        "baseTimeNanoseconds": 0,
    }


def _job(tmp_path: Path, **kw) -> nsyscomm.Result:
    # rank 1's window starts one call earlier: it holds seq 4, rank 0's trace does not
    (tmp_path / "r0.json").write_text(json.dumps(_trace(0, [5, 6, 7], **kw)))
    (tmp_path / "r1.json").write_text(json.dumps(_trace(1, [4, 5, 6, 7], **kw)))
    return nsyscomm.load(tmp_path, cache=False)


def _pairs(res) -> set[tuple[int, ...]]:
    """Each logical collective's message sizes: a right match holds one size twice."""
    c = res.collectives
    return {tuple(sorted(g["bytes"].tolist())) for _, g in c.groupby("logical_id")}


def test_seq_matches_exactly(tmp_path):
    res = _job(tmp_path)
    assert _pairs(res) == {(20000,), (24000, 24000), (28000, 28000), (32000, 32000)}
    assert not any("call order" in w for w in res.warnings)


def test_comms_id_alone_matches_exactly(tmp_path):
    res = _job(tmp_path, seq=False, group=False, comms_id=True)
    assert _pairs(res) == {(20000,), (24000, 24000), (28000, 28000), (32000, 32000)}
    assert not any("call order" in w for w in res.warnings)


def test_without_them_calls_match_by_order_and_say_so(tmp_path):
    res = _job(tmp_path, seq=False)
    assert (20000, 24000) in _pairs(res)  # today's rule: the n-th call with the n-th
    assert any("7 call(s) without nsyscomm or NCCL payload metadata" in w for w in res.warnings)


def test_a_seq_without_its_group_is_not_trusted(tmp_path):
    res = _job(tmp_path, group=False)
    assert (20000, 24000) in _pairs(res)
