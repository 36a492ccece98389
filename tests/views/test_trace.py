"""nsyscomm trace: the Chrome Trace Event Format document (Perfetto / chrome://tracing)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from click.testing import CliRunner

from nsyscomm.commands.views import trace as trace_cmd
from nsyscomm.views import trace as tr
from tests.conftest import REAL_NSYS, job_inputs, loaded, sample

H100 = REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite"


INPUTS = job_inputs()
_sample = sample


def validate(doc: dict) -> dict:
    """Structural checks every trace must pass; returns the events grouped by phase."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    json.dumps(doc, allow_nan=False)  # strict JSON
    by_ph = defaultdict(list)
    for e in doc["traceEvents"]:
        for k in ("ph", "ts", "pid", "tid"):
            assert k in e, (k, e)
        assert isinstance(e["ts"], float), e  # microseconds, as floats
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        by_ph[e["ph"]].append(e)
    assert set(by_ph) <= {"X", "M", "C", "s", "f"}, set(by_ph)
    for e in by_ph["X"]:
        assert isinstance(e["dur"], float) and e["dur"] >= 0 and e["ts"] >= 0
        assert isinstance(e["name"], str) and e["name"] and isinstance(e["args"], dict)
    # X events of one track nest properly (Perfetto drops slices that only partly overlap)
    tracks = defaultdict(list)
    for e in by_ph["X"]:
        tracks[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for spans in tracks.values():
        stack: list = []
        for s, end in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or end <= stack[-1], "partly overlapping slices on one track"
            stack.append(end)
    # every track with slices is named
    named = {(e["pid"], e["tid"]) for e in by_ph["M"] if e["name"] == "thread_name"}
    assert set(tracks) <= named
    assert {p for p, _ in tracks} <= {e["pid"] for e in by_ph["M"] if e["name"] == "process_name"}
    # flows: s/f pairs with one id, same cat and name, each end inside a slice of its track
    starts = {e["id"]: e for e in by_ph["s"]}
    finishes = {e["id"]: e for e in by_ph["f"]}
    assert len(starts) == len(by_ph["s"]) and len(finishes) == len(by_ph["f"])
    assert set(starts) == set(finishes)
    for fid, s in starts.items():
        f = finishes[fid]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"])
        assert f.get("bp") == "e"
        assert s["ts"] <= f["ts"]  # in order of arrival; a launch before its execution
        if s["cat"] == "launch":  # an asynchronous call's launch to its execution, on its rank
            assert s["pid"] == f["pid"] and s["tid"] != f["tid"]
        else:
            assert s["pid"] != f["pid"]  # across ranks
        for end, cat in ((s, "collective_launch" if s["cat"] == "launch" else "collective"), (f, "collective")):
            assert any(
                x["ts"] <= end["ts"] <= x["ts"] + x["dur"] and x["cat"] == cat
                for x in by_ph["X"]
                if (x["pid"], x["tid"]) == (end["pid"], end["tid"])
            ), end
    # counters: numeric args, never negative, back to zero at the end of each rank
    last = {}
    for e in sorted(by_ph["C"], key=lambda e: e["ts"]):
        assert e["args"] and all(isinstance(v, int) and v >= 0 for v in e["args"].values()), e
        last[(e["pid"], e["name"])] = e["args"]
    assert all(all(v == 0 for v in a.values()) for a in last.values())
    return by_ph


@pytest.mark.parametrize("path", INPUTS)
def test_trace_structure(path):
    res = loaded(path)
    doc = tr.build(res)
    by_ph = validate(doc)
    calls = [e for e in by_ph["X"] if e["cat"] == "collective"]
    assert len(calls) == res.n_calls  # one complete event per collective call
    ranks = set(res.collectives["rank"])
    assert {e["pid"] for e in calls} == ranks  # a track (process) per rank
    # args carry every metadata field of the normalized table
    for k in ("bytes", "dtype", "group", "seq", "caller", "step", "source", "op", "api", "rank", "group_size"):
        assert all(k in e["args"] for e in calls), k
    # one flow per consecutive pair of participating ranks of each logical collective
    expected = res.con.execute(
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(DISTINCT rank) AS n FROM collectives "
        'GROUP BY "group", op, seq HAVING count(DISTINCT rank) >= 2)'
    ).fetchone()[0]
    across = [e for e in by_ph["s"] if e["cat"] != "launch"]
    assert len(across) == expected == doc["otherData"]["flows"]
    # bytes in flight: a counter per rank
    assert {e["pid"] for e in by_ph["C"] if e["name"] == "bytes in flight"} == ranks
    assert doc["otherData"]["calls"] == res.n_calls


def test_trace_names_and_args_on_wrapper_sample():
    res = loaded(_sample("synthetic_ddp_4rank.sqlite"))
    calls = [e for e in tr.build(res)["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    first = min(calls, key=lambda e: (e["args"]["rank"], e["ts"]))
    a = first["args"]
    assert first["name"] == f"{a['op']} 1.0 MB" and a["bytes"] == 1048576
    assert a["caller"] and a["dtype"] == "float32" and a["source"] == "wrapper"
    assert a["logical"] == f"{a['group']}/{a['op']}/{a['seq']}"
    assert a["latency_ns"] <= a["duration_ns"] and a["wait_ns"] == a["duration_ns"] - a["latency_ns"]
    # timestamps: us since the earliest event, ns precision kept
    origin = tr.build(res)["otherData"]["time_origin_ns"]
    assert first["ts"] == pytest.approx((a["gpu_start"] - origin) / 1000, abs=1e-3)
    assert first["dur"] == pytest.approx(a["duration_ns"] / 1000, abs=1e-3)
    # bytes in flight peak at the largest message on a rank whose calls don't overlap
    peak = max(
        e["args"]["bytes"]
        for e in tr.build(res)["traceEvents"]
        if e["ph"] == "C" and e["name"] == "bytes in flight" and e["pid"] == 0
    )
    assert peak == max(e["args"]["bytes"] for e in calls if e["pid"] == 0)


def test_gloo_calls_sit_on_host_threads():
    res = loaded(_sample("synthetic_gloo_cpu.sqlite"))
    doc = tr.build(res)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    calls = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "collective"]
    assert calls and all(names[(e["pid"], e["tid"])].startswith("CPU thread") for e in calls)


def test_real_file_tracks_per_rank_and_stream():
    if not H100.exists():
        pytest.skip(f"{H100} not present")
    doc = tr.build(loaded(H100))
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name")
    assert any(n.startswith("GPU 0 stream") for n in names) and any(n.startswith("GPU 1 stream") for n in names)
    procs = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    assert procs[0].startswith("rank 0") and procs[1].startswith("rank 1")
    text = tr.dumps(doc)
    assert "StringIds" not in text and "PATH=" not in text  # nothing from the report's environment


def test_lanes_keep_partly_overlapping_calls_apart():
    from nsyscomm.views.trace_tracks import Lanes

    lanes = Lanes()
    assert lanes.place(0, 10) == 0
    assert lanes.place(2, 5) == 0  # nested
    assert lanes.place(8, 15) == 1  # partly overlaps [0, 10]
    assert lanes.place(20, 30) == 0


@pytest.mark.parametrize(
    "text,expect", [("2:5", (2, 5)), ("3:", (3, None)), (":4", (None, 4)), ("7", (7, 8)), (None, None)]
)
def test_parse_steps(text, expect):
    from nsyscomm.steps import parse_step_range

    assert parse_step_range(text) == expect


@pytest.mark.parametrize("text", ["5:2", "3:3", "a:b", "1:2:3", ""])
def test_parse_steps_rejects(text):
    from nsyscomm.steps import parse_step_range

    with pytest.raises(ValueError):
        parse_step_range(text)


def test_cli_trace_steps_filter(tmp_path):
    path = _sample("synthetic_ddp_4rank.sqlite")
    out = tmp_path / "t.json"
    r = CliRunner().invoke(trace_cmd, [str(path), "-o", str(out), "--steps", "1:2"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    by_ph = validate(doc)
    steps = {e["args"]["step"] for e in by_ph["X"]}
    assert steps == {1}
    assert doc["otherData"]["step_range"] == [1, 2]
    assert [s["step"] for s in doc["otherData"]["steps"]] == [1]
    full = tr.build(loaded(path))
    assert 0 < len(by_ph["X"]) < len([e for e in full["traceEvents"] if e["ph"] == "X"])


def test_cli_trace_steps_errors(tmp_path):
    path = _sample("synthetic_ddp_4rank.sqlite")
    r = CliRunner().invoke(trace_cmd, [str(path), "-o", str(tmp_path / "t.json"), "--steps", "5:2"])
    assert r.exit_code == 2 and "empty" in r.output
    if H100.exists():  # no step information at all: one line, exit 2
        r = CliRunner().invoke(trace_cmd, [str(H100), "-o", str(tmp_path / "t.json"), "--steps", "0:1"])
        assert r.exit_code == 2, r.output
        assert r.output.startswith("nsyscomm: error: --steps") and r.output.count("\n") == 1
        assert not (tmp_path / "t.json").exists()


def test_cli_trace_per_rank_layout(tmp_path):
    path = _sample("synthetic_fsdp_8rank.sqlite")
    d = tmp_path / "byteps"
    out = tmp_path / "all.json"
    r = CliRunner().invoke(trace_cmd, [str(path), "-o", str(out), "--per-rank", str(d)])
    assert r.exit_code == 0, r.output
    res = loaded(path)
    ranks = sorted(set(res.collectives["rank"]))
    assert sorted(int(p.name) for p in d.iterdir()) == ranks
    whole = json.loads(out.read_text())
    origin = whole["otherData"]["time_origin_ns"]
    total = 0
    for rank in ranks:
        f = d / str(rank) / "comm.json"
        doc = json.loads(f.read_text())
        by_ph = validate(doc)
        assert {e["pid"] for e in doc["traceEvents"]} == {rank}
        assert not by_ph["s"] and not by_ph["f"]  # flows only in the job's trace
        assert doc["otherData"]["time_origin_ns"] == origin  # files stay aligned
        total += len([e for e in by_ph["X"] if e["cat"] == "collective"])
    assert total == res.n_calls


def test_cli_trace_per_rank_only_and_stdout(tmp_path, monkeypatch):
    path = _sample("synthetic_gloo_cpu.sqlite")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(trace_cmd, [str(path), "--per-rank", "pr"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "pr" / "0" / "comm.json").exists() and not (tmp_path / "trace.json").exists()
    r = CliRunner().invoke(trace_cmd, [str(path)])
    assert r.exit_code == 0 and (tmp_path / "trace.json").exists()
    r = (
        CliRunner(mix_stderr=False).invoke(trace_cmd, [str(path), "-o", "-"])
        if _mix_stderr_ok()
        else CliRunner().invoke(trace_cmd, [str(path), "-o", "-"])
    )
    assert r.exit_code == 0
    validate(json.loads(r.stdout))


def _mix_stderr_ok() -> bool:
    import inspect

    return "mix_stderr" in inspect.signature(CliRunner.__init__).parameters


def test_cli_trace_missing_input(tmp_path):
    r = CliRunner().invoke(trace_cmd, [str(tmp_path / "nope.sqlite"), "-o", str(tmp_path / "t.json")])
    assert r.exit_code == 2
    assert r.output.startswith("nsyscomm: error:") and r.output.count("\n") == 1


def test_cpu_only_call_and_host_range_sharing_a_thread():
    """A gloo call and an NCCL call's host range that partly overlap on one thread: split lanes, valid trace."""
    from types import SimpleNamespace

    base = {
        k: None
        for k in (
            "report",
            "host",
            "api",
            "bytes",
            "dtype",
            "numel",
            "group",
            "group_ranks",
            "caller",
            "step",
            "source",
            "device",
            "stream",
            "gpu_start",
            "gpu_end",
        )
    }
    rows = []
    for rank in (0, 1):
        rows.append(
            {
                **base,
                "rank": rank,
                "pid": 10 + rank,
                "tid": 10 + rank,
                "op": "all_reduce",
                "seq": 0,
                "group": "gloo",
                "cpu_start": 1_000,
                "cpu_end": 100_000,
                "duration_ns": 99_000,
                "bytes": 64,
            }
        )
        rows.append(
            {
                **base,
                "rank": rank,
                "pid": 10 + rank,
                "tid": 10 + rank,
                "op": "all_reduce",
                "seq": 0,
                "group": "nccl",
                "cpu_start": 50_000,
                "cpu_end": 150_000,
                "gpu_start": 60_000 + rank,
                "gpu_end": 90_000,
                "device": rank,
                "stream": 7,
                "duration_ns": 30_000,
                "bytes": 128,
            }
        )
    doc = tr.build_from_rows(rows, SimpleNamespace(reports=["x"], warnings=[]), origin=0)
    by_ph = validate(doc)
    assert len([e for e in by_ph["X"] if e["cat"] == "collective"]) == 4
    assert len(by_ph["s"]) == 2  # one flow per logical collective (2 ranks each)
    names = [e["args"]["name"] for e in by_ph["M"] if e["name"] == "thread_name" and e["pid"] == 0]
    assert any("[overlap 1]" in n for n in names)
