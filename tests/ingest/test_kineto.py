"""PyTorch profiler (Kineto) traces as a source: generated traces with exact expectations,
and the real traces in ../shared/real/kineto when present."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from nsyscomm import api, nvtx_format
from nsyscomm.duck import arrow_frame
from nsyscomm.errors import InputError
from nsyscomm.ingest.kineto import meta as kineto_meta
from nsyscomm.ingest.kineto import stream as kineto_stream
from nsyscomm.ingest.kineto import trace as kineto
from tests import conftest

REAL = conftest.REAL / "kineto"
need_real = pytest.mark.skipif(not REAL.is_dir(), reason="shared/real/kineto is absent")


def _x(name, cat, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _meta_args(coll, inn, out, dtype, n=2, pg="0", ranks="[0, 1]"):
    return {
        "Collective name": coll,
        "In msg nelems": inn,
        "Out msg nelems": out,
        "Group size": n,
        "dtype": dtype,
        "Process Group Name": pg,
        "Process Group Ranks": ranks,
    }


def make_trace(rank: int, late_us: float = 0.0, kernel_args: bool = True) -> dict:
    """One rank: all_gather (1024 float per rank), reduce_scatter (2048 bf16 in, 1024 out), all_reduce
    (1000 float; metadata only on record_param_comms), a gloo barrier, and one NCCL kernel without a
    launch event. ts are µs floats with sub-µs digits, as Kineto writes them."""
    pid, tid, base = 4000 + rank, 4000 + rank, 1_000_000.125 + late_us
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": base, "args": {"name": "python"}}]
    calls = [
        (
            "nccl:_all_gather_base",
            "ncclDevKernel_AllGather_RING_LL",
            _meta_args("_allgather_base", 1024, 2048, "Float"),
        ),
        (
            "nccl:_reduce_scatter_base",
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
            _meta_args("_reduce_scatter_base", 2048, 1024, "BFloat16"),
        ),
        ("nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", _meta_args("allreduce", 1000, 1000, "Float")),
    ]
    for i, (rng, kname, meta) in enumerate(calls):
        t = base + 100.0 * i
        corr = 10 + i
        # record_param_comms encloses the nccl:* range (PyTorch 2.x order)
        ev.append(_x("record_param_comms", "cpu_op", t, 50.5, pid, tid, **meta))
        ev.append(_x(rng, "user_annotation", t + 1.25, 40.0, pid, tid))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 10.5, 5.0, pid, tid, correlation=corr))
        kargs = {"device": rank, "stream": 7, "correlation": corr}
        if kernel_args and i != 2:
            kargs.update(meta)
        ev.append(_x(kname, "kernel", t + 20.0, 30.0 + i, rank, 7, **kargs))
    ev.append(_x("gloo:barrier", "user_annotation", base + 400.0, 12.5, pid, tid))
    ev.append(
        _x(
            "ncclDevKernel_Broadcast_RING_LL",
            "kernel",
            base + 500.0,
            3.0,
            rank,
            7,
            device=rank,
            stream=7,
            correlation=999,
        )
    )
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "nccl_version": "2.27.3"},
        "traceEvents": ev,
        "traceName": f"rank{rank}.json",
        "baseTimeNanoseconds": 0,
    }


def write(path: Path, trace: dict) -> Path:
    data = json.dumps(trace, indent=1)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(data)
    else:
        path.write_text(data)
    return path


def test_one_trace_exact(tmp_path):
    e = kineto.extract(write(tmp_path / "r0.json", make_trace(0)))
    c = arrow_frame(e.calls).sort_values("cpu_start", na_position="last").reset_index(drop=True)
    assert list(c["api"]) == [
        "nccl:_all_gather_base",
        "nccl:_reduce_scatter_base",
        "nccl:all_reduce",
        "gloo:barrier",
        "ncclDevKernel_Broadcast_RING_LL",
    ]
    assert list(c["op"]) == ["all_gather", "reduce_scatter", "all_reduce", "barrier", "broadcast"]
    # S: all_gather n x in x 4; reduce_scatter n x out x 2 (= in x 2); all_reduce count x 4; barrier 0
    assert [None if pd.isna(b) else int(b) for b in c["bytes"]] == [8192, 4096, 4000, None, None]
    assert list(c["dtype"][:3]) == ["float32", "bfloat16", "float32"]
    assert list(c["group_size"][:3]) == [2, 2, 2]
    assert list(c["group_ranks"][:3]) == ["[0,1]"] * 3
    # µs floats -> exact integer ns
    assert c.loc[0, "cpu_start"] == 1_000_001_375
    assert c.loc[0, "gpu_start"] == 1_000_020_125 and c.loc[0, "gpu_end"] == 1_000_050_125
    assert c.loc[0, "kernel_ns"] == 30_000
    assert pd.isna(c.loc[3, "gpu_start"])  # gloo: CPU only
    assert c.loc[3, "cpu_end"] - c.loc[3, "cpu_start"] == 12_500
    assert c.loc[4, "source"] == "kernel_name"
    assert set(c["source"][:4]) == {"torch_range"}
    assert list(c["pid"].unique()) == [4000]
    assert e.markers.to_dict("records") == [{"pid": 4000, "rank": 0, "local_rank": None, "world": 2, "host": None}] or (
        int(e.markers.loc[0, "rank"]) == 0 and int(e.markers.loc[0, "pid"]) == 4000
    )
    # the rank's span: its first host event to the end of its device's last kernel (the broadcast
    # kernel at base + 500 us, 3 us long), past its last host event (the barrier, at base + 412.5 us)
    assert e.spans.to_dict("records") == [{"pid": 4000, "first_ns": 1_000_000_125, "last_ns": 1_000_503_125}]
    assert any("no launch event" in w for w in e.warnings)


def test_folder_of_ranks_through_pipeline(tmp_path):
    # file order differs from rank order: ranks must come from distributedInfo
    write(tmp_path / "a_rank1.json.gz", make_trace(1, late_us=5.0))
    write(tmp_path / "b_rank0.json", make_trace(0))
    res = api.load(tmp_path)
    col = res.collectives
    assert dict(col.groupby("rank")["pid"].first()) == {0: 4000, 1: 4001}
    s = res.summary.set_index(["op", "bytes"])
    assert s.loc[("all_gather", 8192), "count"] == 1 and s.loc[("all_gather", 8192), "calls"] == 2
    # latency = the faster rank's kernel: 30 us
    assert s.loc[("all_gather", 8192), "avg_ms"] == pytest.approx(0.030)
    assert s.loc[("all_gather", 8192), "busbw_GBps"] == pytest.approx(8192 / 30e-6 / 1e9 * 0.5)
    # rank 1 is last, by 5 us: under the 100 us in which no rank is named late, so no straggler
    assert res.skew["per_rank"][1]["late_count"] >= 1 and res.skew["straggler_rank"] is None


def test_stream_parser_chunk_boundaries(tmp_path):
    trace = make_trace(0)
    p = write(tmp_path / "t.json", trace)
    events = [v for k, v in kineto_stream.iter_trace(p, chunk=7) if k == "event"]
    meta = dict(v for k, v in kineto_stream.iter_trace(p, chunk=7) if k == "meta")
    assert events == trace["traceEvents"]
    assert meta["distributedInfo"]["rank"] == 0
    # a bare event array is a trace too
    q = tmp_path / "bare.json"
    q.write_text(json.dumps(trace["traceEvents"]))
    assert [v for _k, v in kineto_stream.iter_trace(q, chunk=5)] == trace["traceEvents"]


def test_to_ns_exact():
    assert kineto_stream.to_ns(kineto_stream.Num("1669783687570192.125")) == 1669783687570192125
    assert kineto_stream.to_ns(kineto_stream.Num("0.0005")) == 1
    assert kineto_stream.to_ns(1682725898240951) == 1682725898240951000


def test_message_size_rules():
    assert kineto_meta.message_size("all_gather", 10, 40, 4, 4) == (160, 40)
    assert kineto_meta.message_size("reduce_scatter", 40, 10, 2, 4) == (80, 40)
    assert kineto_meta.message_size("all_reduce", 10, 10, 8, 4) == (80, 10)
    assert kineto_meta.message_size("all_to_all", 12, 12, 1, 4) == (12, 12)
    assert kineto_meta.message_size("barrier", None, None, None, 4) == (0, 0)


def test_bad_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(InputError):
        kineto.extract(p)


@need_real
def test_real_nccl_data():
    e = kineto.extract(REAL / "nccl_data.json.gz")
    c = arrow_frame(e.calls)
    assert len(c) == 21
    assert c["op"].value_counts().to_dict() == {"all_reduce": 15, "broadcast": 6}
    assert set(c["source"]) == {"torch_range"} and c["kernels"].sum() == 21
    assert int(e.markers.loc[0, "rank"]) == 0 and int(e.markers.loc[0, "world"]) == 2
    assert e.nsys_version == "kineto (NCCL 2.17.1)"
    ar = c[c["op"] == "all_reduce"]
    assert set(ar["group_size"]) == {2} and set(ar["dtype"]) == {"float32"}
    assert sorted(set(ar["bytes"].astype(int))) == [8196000, 9724160, 26255360, 26550272, 31502336]
    assert sorted(set(c[c["op"] == "broadcast"]["bytes"].astype(int))) == [424, 212480]


@need_real
def test_real_two_sampled_ranks():
    res = api.load(REAL / "trace_filter")
    assert res.reports == ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]
    assert res.n_calls == 20
    assert sorted(res.collectives["rank"].unique()) == [0, 1]
    assert res.collectives["op"].value_counts().to_dict() == {"all_reduce": 8, "all_to_all": 8, "all_gather": 4}


@need_real
def test_real_df_index_resolver_rank1():
    e = kineto.extract(REAL / "df_index_resolver.json.gz")
    assert len(e.calls) == 2020 and set(e.calls["op"].to_pylist()) == {"all_reduce"}
    assert int(e.markers.loc[0, "rank"]) == 1


def test_job_of_mixed_sources_stacks_their_calls(tmp_path):
    """The calls of different sources differ in Arrow types (a trace's: large strings, sizes as
    doubles, columns of nulls; an nsys report's: strings, 64- and 32-bit integers), and a cached
    extract went through Parquet: the job stacks them by column name, each report's calls as it
    alone gives them."""
    from nsyscomm.extract import cache

    trace = kineto.extract(write(tmp_path / "r0.json", make_trace(0)), "r0.json")
    report = tmp_path / "gloo.sqlite"
    report.write_bytes((api.sample_reports_dir() / "synthetic_gloo_cpu.sqlite").read_bytes())
    cache.store(api.extract_one(report, "gloo.sqlite"), report, root=tmp_path / "cache")
    nsys = cache.load(report, "gloo.sqlite", root=tmp_path / "cache")
    assert nsys is not None and trace.calls.schema != nsys.calls.schema

    def per_report(res):
        c = res.collectives
        return {r: (len(g), int(g["bytes"].fillna(0).sum()), sorted(g["op"])) for r, g in c.groupby("report")}

    both = per_report(api.combine([trace, nsys]))
    assert both == {**per_report(api.combine([trace])), **per_report(api.combine([nsys]))}
    assert both["r0.json"][0] == 5 and both["gloo.sqlite"][0] > 0


def make_one_rank_trace(wrapper: bool) -> dict:
    """A one-H100 job as torch.profiler records it: NCCL launches no kernel on a one-rank
    communicator, so each out-of-place all_gather is one device-to-device copy launched inside its
    range; the first (8 bytes, DDP's) also initializes the communicator for 322 ms, with host to
    device copies of its own. Then 12 all_gathers of 4 MB, 60 us of host time each, and in-place
    all_reduces (no copy at all). With ``wrapper``, nsyscomm's ranges enclose PyTorch's."""
    pid = tid = 9000
    ev = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0.0, "args": {"name": "python"}}]
    corr = iter(range(100, 10_000))

    def call(t: float, dur: float, op: str, nbytes: int, seq: int, copies: list[tuple[str, float, float]]) -> None:
        if wrapper:
            msg = nvtx_format.format_collective(
                op, api=op, bytes=nbytes, dtype="float32", numel=nbytes // 4, pg=0, gsize=1, seq=seq, step=seq // 2
            )
            ev.append(_x(msg, "user_annotation", t - 1.0, dur + 2.0, pid, tid))
        meta = _meta_args(op.replace("_", ""), nbytes // 4, nbytes // 4, "Float", n=1, ranks="[0]")
        ev.append(_x("record_param_comms", "cpu_op", t - 0.5, dur + 1.0, pid, tid, **meta))
        ev.append(_x(f"nccl:{op}", "user_annotation", t, dur, pid, tid))
        for name, at, length in copies:
            c = next(corr)
            ev.append(_x("cudaMemcpyAsync", "cuda_runtime", t + at, 2.0, pid, tid, correlation=c))
            ev.append(_x(name, "gpu_memcpy", t + at + 3.0, length, 0, 7, device=0, stream=7, correlation=c))

    init = [("Memcpy HtoD (Pageable -> Device)", 1000.0 + 100.0 * i, 1.0) for i in range(5)]
    call(1_000.0, 322_000.0, "all_gather", 8, 0, [*init, ("Memcpy DtoD (Device -> Device)", 321_990.0, 1.0)])
    t = 400_000.0
    for i in range(12):
        call(t, 60.0, "all_gather", 4 << 20, 1 + 2 * i, [("Memcpy DtoD (Device -> Device)", 50.0, 5.0)])
        call(t + 100.0, 40.0, "all_reduce", 4 << 20, 2 + 2 * i, [])
        t += 1_000.0
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1, "nccl_version": "2.28.9"},
        "traceEvents": ev,
        "baseTimeNanoseconds": 0,
    }


@pytest.mark.parametrize("wrapper", [False, True], ids=["torch_ranges", "wrapper_ranges"])
def test_one_rank_nccl_setup_is_set_apart_on_kineto(tmp_path, wrapper):
    """As on nsys exports: a one-rank call's device time is its device-to-device copy (the init's
    host-to-device copies are not the call's), so the first call, 322 ms of NCCL's communicator
    setup, is set apart and leaves the op table."""
    res = api.load([write(tmp_path / "h100.json", make_one_rank_trace(wrapper))], cache=False)
    (row,) = res.setup.to_dict("records")
    assert (row["op"], row["bytes"], row["how"]) == ("all_gather", 8, "first_call")
    assert row["took_ms"] == pytest.approx(322.0 + 0.002 * wrapper, abs=1e-6)
    summary = res.summary.set_index(["op", "bytes"])
    assert ("all_gather", 8) not in summary.index
    # each 4 MB all_gather: its one 5 us copy (not the 60 us host range); all_reduce in place: host time
    assert summary.loc[("all_gather", 4 << 20), "count"] == 12
    assert summary.loc[("all_gather", 4 << 20), "avg_ms"] == pytest.approx(0.005)
    assert summary.loc[("all_reduce", 4 << 20), "avg_ms"] == pytest.approx(0.040 + 0.002 * wrapper)


def test_real_one_gpu_kineto_trace_sets_aside_nccl_setup():
    """The one-H100 job's torch.profiler trace (kineto/*1xH100*), where present: its first
    collective, NCCL's communicator setup, is set apart as on the job's nsys export."""
    found = sorted(REAL.glob("*1xH100*.json*")) if REAL.is_dir() else []
    if not found:
        pytest.skip("no one-H100 Kineto trace in shared/real/kineto")
    doc = api.load(found[:1], cache=False)
    rows = doc.setup.to_dict("records")
    assert len(rows) == 1 and rows[0]["op"] == "all_gather" and rows[0]["took_ms"] > 50
    assert not [1 for r in doc.summary.to_dict("records") if r["op"] == "all_gather" and r["bytes"] == rows[0]["bytes"]]


def test_calls_after_a_rank_joined_are_marked(tmp_path):
    """The wrapper's nsyscomm.joined|step=N range (Join's exit, as torch.profiler records it)
    marks the calls inside it with the step the rank joined at; the calls before stay unmarked."""
    pid = 7000
    ev = []
    for i, t in enumerate((100.0, 200.0, 300.0)):
        msg = nvtx_format.format_collective(
            "all_reduce", api="all_reduce", bytes=4, dtype="float32", numel=1, pg=0, gsize=2, seq=i, step=min(i, 1)
        )
        ev.append(_x(msg, "user_annotation", t, 10.0, pid, pid))
    ev.append(_x(nvtx_format.format_joined(1), "user_annotation", 150.0, 500.0, pid, pid))
    trace = {"distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2}, "traceEvents": ev}
    calls = arrow_frame(kineto.extract(write(tmp_path / "r1.json", trace)).calls).sort_values("cpu_start")
    assert [None if pd.isna(v) else int(v) for v in calls["joined"]] == [None, 1, 1]
