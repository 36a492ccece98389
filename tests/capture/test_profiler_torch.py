"""`nsyscomm run --profiler torch`: torch.profiler instead of nsys, the wrapper's metadata in Kineto traces.

The end-to-end test runs a real 2-rank gloo torchrun job (no nsys needed), about 10-20 s on 2 cores.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from nsyscomm.duck import arrow_frame
from tests.conftest import DATA, ROOT, run_job

SCRIPT = DATA / "train_all_ops.py"
WORLD = 2

needs_torchrun = pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")


def _cli(args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", *args],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    base = tmp_path_factory.mktemp("torchprof")
    expect = base / "expect"
    expect.mkdir()
    env = dict(os.environ, NSYSCOMM_EXPECT_DIR=str(expect))
    options = ("--profiler", "torch", "--format", "json")
    r = run_job(base / "out", SCRIPT, ranks=WORLD, options=options, env=env, cwd=str(ROOT), timeout=300)
    did = {}
    for f in expect.glob("rank*.json"):
        d = json.loads(f.read_text())
        did[d["rank"]] = d
    return r, r.out, did


def test_run_writes_one_trace_per_rank(job):
    r, out, did = job
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*.json.gz")) == [f"rank{i}.json.gz" for i in range(WORLD)]
    assert not list(out.glob("*.partial.gz"))
    assert sorted(did) == list(range(WORLD))
    summary = json.loads(r.stdout)  # the summary of the traces, on stdout
    assert summary["skew"]["straggler_rank"] == WORLD - 1


def test_trace_carries_user_annotations(job):
    from nsyscomm import nvtx_format as fmt

    _, out, _ = job
    for rank in range(WORLD):
        d = json.load(gzip.open(out / f"rank{rank}.json.gz", "rt"))
        names = [(e.get("cat"), e.get("name", "")) for e in d["traceEvents"] if e.get("ph") == "X"]
        marks = [fmt.parse(n) for c, n in names if c == "user_annotation" and n.startswith(fmt.RANK_PREFIX + "|")]
        assert [m["rank"] for m in marks] == [str(rank)]
        assert any(c == "user_annotation" and n.startswith(fmt.COLLECTIVE_PREFIX) for c, n in names)


def test_trace_records_only_what_the_reader_reads(job):
    """The CPU activity records the user-scope ranges (the wrapper's, c10d's) and no aten
    op; torch's own profiler notes stay out of the job's output."""
    r, out, _ = job
    for rank in range(WORLD):
        d = json.load(gzip.open(out / f"rank{rank}.json.gz", "rt"))
        cats = {e.get("cat") for e in d["traceEvents"] if e.get("ph") == "X"}
        assert "user_annotation" in cats
        ops = [e["name"] for e in d["traceEvents"] if e.get("cat") == "cpu_op"]
        assert not ops, ops[:5]
    assert "Profiler clears events" not in r.stderr and "Profiler clears events" not in r.stdout


def test_same_calls_as_the_script(job):
    import nsyscomm

    _, out, did = job
    res = nsyscomm.load(str(out))
    c = res.collectives
    assert (c["source"] == "wrapper").all(), c["source"].value_counts().to_dict()
    assert set(c["rank"]) == set(range(WORLD))
    for rank, d in did.items():
        mine = c[c["rank"] == rank]
        user = mine[~mine["api"].str.startswith("ddp.")]
        got = collections.Counter((r.op, r.api, None if pd.isna(r.bytes) else int(r.bytes)) for r in user.itertuples())
        want = collections.Counter((x["op"], x["api"], x["bytes"]) for x in d["calls"])
        assert got == want, f"rank {rank}: missing {want - got}, extra {got - want}"
        ddp = mine[mine["api"] == "ddp.allreduce"]
        assert len(ddp) == d["steps"]
        assert set(ddp["bytes"].astype(int)) == {d["ddp_param_bytes"]}
        assert mine["caller"].str.startswith("train_all_ops.py:").all()
        assert (mine["cpu_end"] >= mine["cpu_start"]).all()


def test_the_late_rank_is_the_straggler(job):
    import nsyscomm

    _, out, did = job
    r = nsyscomm.load(str(out))
    late = next(iter(did.values()))["late_rank"]
    assert r.skew["straggler_rank"] == late
    wait = r.ranks.set_index("rank")["wait_ms"]
    assert (wait.drop(late) > wait[late]).all(), wait.to_dict()


def test_exit_code_passes_through_and_trace_written_at_exit(tmp_path):
    """A process that exits with 3 without destroying its process group: the atexit hook writes the trace."""
    pytest.importorskip("torch")
    code = (
        "import os, sys, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=sys.argv[1])\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "t = torch.ones(8); dist.all_reduce(t)\n"
        "sys.exit(3)\n"
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "o"
    r = _cli(
        ["run", "--profiler", "torch", "-o", str(out), "--no-summary", "--", sys.executable, "-c", code, str(port)]
    )
    assert r.returncode == 3, r.stderr[-2000:]
    import nsyscomm

    c = nsyscomm.load(str(out)).collectives
    assert list(c["api"]) == ["all_reduce"] and int(c["bytes"].iloc[0]) == 32 and c["rank"].iloc[0] == 0


def test_no_trace_means_exit_2(tmp_path):
    r = _cli(["run", "--profiler", "torch", "-o", str(tmp_path / "o"), "--", sys.executable, "-c", "pass"])
    assert r.returncode == 2
    assert "no torch.profiler trace" in r.stderr


# ------------------------------------------------------------------ ingest on a synthetic Kineto trace


def _ev(name, ts, dur, cat="user_annotation", pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_kineto_wrapper_ranges_own_kernels(tmp_path):
    from nsyscomm import nvtx_format as fmt
    from nsyscomm.ingest.kineto import trace as kineto

    msg = fmt.format_collective(
        "all_reduce",
        api="all_reduce",
        bytes=4096,
        dtype="float32",
        numel=1024,
        pg="0",
        gsize=2,
        seq=7,
        step=3,
        caller="train.py:9 main|x=y",
    )
    marker = fmt.format_rank_marker(1, 1, 2, "node-a")
    events = [
        _ev(marker, 5, 0),
        _ev(msg, 10, 50),
        _ev("nccl:all_reduce", 12, 40),
        _ev("cudaLaunchKernel", 20, 5, cat="cuda_runtime", correlation=1),
        _ev(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            30,
            8,
            cat="kernel",
            pid=0,
            tid=7,
            correlation=1,
            stream=7,
            device=0,
        ),
        # a second wrapper range without kernel (a CPU collective) and a gloo range on a worker thread
        _ev(
            fmt.format_collective("barrier", api="barrier", bytes=0, dtype="", numel=0, pg="0", gsize=2, seq=8), 100, 20
        ),
        _ev("gloo:barrier", 105, 5, tid=200),
    ]
    p = tmp_path / "rank1.json"
    p.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    e = kineto.extract(p)
    c = arrow_frame(e.calls)
    assert list(c["source"]) == ["wrapper", "wrapper"]
    ar = c.iloc[0].to_dict()
    keys = ("op", "api", "bytes", "dtype", "numel", "group", "group_size", "seq", "step", "caller")
    assert tuple(ar[k] for k in keys) == (
        "all_reduce",
        "all_reduce",
        4096,
        "float32",
        1024,
        "0",
        2,
        7,
        3,
        "train.py:9 main|x=y",
    )
    keys = ("cpu_start", "cpu_end", "gpu_start", "gpu_end", "kernels")
    assert tuple(ar[k] for k in keys) == (10_000, 60_000, 30_000, 38_000, 1)
    b = c.iloc[1].to_dict()
    assert b["op"] == "barrier" and pd.isna(b["gpu_start"]) and pd.isna(b["step"]) and b["kernels"] == 0
    m = e.markers.iloc[0].to_dict()
    assert tuple(m[k] for k in ("pid", "rank", "local_rank", "world", "host")) == (
        100,
        1,
        1,
        2,
        "node-a",
    )  # marker over distributedInfo


def test_steps_window(tmp_path):
    """--steps 1:3 profiles steps 1 and 2 only (started / stopped at the wrapper's step changes)."""
    pytest.importorskip("torch")
    code = (
        "import os, sys, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=sys.argv[1])\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "p = torch.nn.Parameter(torch.ones(4)); opt = torch.optim.SGD([p], lr=0.1)\n"
        "for i in range(5):\n"
        "    t = torch.ones(4 * (i + 1)); dist.all_reduce(t)\n"
        "    p.grad = torch.ones(4); opt.step()\n"
        "dist.destroy_process_group()\n"
    )
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "o"
    r = _cli(
        [
            "run",
            "--profiler",
            "torch",
            "--steps",
            "1:3",
            "-o",
            str(out),
            "--no-summary",
            "--",
            sys.executable,
            "-c",
            code,
            str(port),
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    import nsyscomm

    res = nsyscomm.load(str(out))
    c = res.collectives.sort_values("cpu_start")
    assert list(c["step"]) == [1, 2] and list(c["bytes"]) == [32, 48] and set(c["rank"]) == {0}
