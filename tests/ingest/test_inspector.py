"""NCCL Inspector dumps (nsyscomm.ingest.inspector) as a source: written by
nsyscomm.synth.inspector byte for byte as NVIDIA's plugin writes them, from the same generated job
as an nsys report, so that both inputs must give the same tables (counts, sizes, bus bandwidth,
the late rank) -- the Inspector's times are whole microseconds, the only difference allowed."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsyscomm
from nsyscomm import discover
from nsyscomm.analyses.contract import document
from nsyscomm.cli import main
from nsyscomm.synth import gen_ddp_4rank, gen_fsdp_8rank, write_sqlite
from nsyscomm.synth import inspector as synth_inspector
from nsyscomm.synth.inspector import Call, Comm, calls_from_reports, write_dumps

US = 1000  # one microsecond, the dumps' resolution, in ns


def _both(
    tmp_path: Path, gen, seed: int, min_size: int = synth_inspector.MIN_SIZE, **dump_args
) -> tuple[dict, dict, list[Call]]:
    reps = gen(seed)
    (tmp_path / "nsys").mkdir()
    for rep in reps:
        write_sqlite(rep, tmp_path / "nsys" / rep.name, seed)
    calls = calls_from_reports(reps, min_size)
    write_dumps(tmp_path / "inspector", calls, **dump_args)
    nsys = document(nsyscomm.load(tmp_path / "nsys", cache=False))
    insp = document(nsyscomm.load(tmp_path / "inspector", cache=False))
    return nsys, insp, calls


def _key(row: dict) -> tuple:
    return (row["op"], row["bytes"], row["group_size"])


def _same_summary(nsys: dict, insp: dict) -> None:
    a = {_key(r): r for r in nsys["summary"]}
    b = {_key(r): r for r in insp["summary"]}
    assert a.keys() == b.keys()
    for k, r in a.items():
        s = b[k]
        assert (s["count"], s["calls"], s["ranks"]) == (r["count"], r["calls"], r["ranks"]), k
        # each latency is floored to the microsecond: at most 1 us shorter per call
        assert r["min_ms"] - 1e-3 <= s["min_ms"] <= r["min_ms"], k
        assert s["busbw_GBps"] == pytest.approx(r["busbw_GBps"], rel=1e-3 / r["min_ms"] + 1e-9), k


def test_same_job_gives_the_same_tables_as_nsys(tmp_path):
    nsys, insp, _ = _both(tmp_path, gen_ddp_4rank, 1)
    _same_summary(nsys, insp)
    ranks = {r["rank"]: (r["calls"], r["bytes"]) for r in nsys["ranks"]}
    assert {r["rank"]: (r["calls"], r["bytes"]) for r in insp["ranks"]} == ranks
    hist = [(h["op"], h["bin_lo"], h["calls"]) for h in nsys["size_histogram"]]
    assert [(h["op"], h["bin_lo"], h["calls"]) for h in insp["size_histogram"]] == hist
    # the sample's rank 2 is late on purpose: the same straggler, the same late arrivals
    assert nsys["skew"]["straggler_rank"] == insp["skew"]["straggler_rank"] == 2
    late = [(d["rank"], d["op"], round(d["delay_ms"], 2)) for d in nsys["diagnosis"]["late"]]
    assert [(d["rank"], d["op"], round(d["delay_ms"], 2)) for d in insp["diagnosis"]["late"]] == late
    assert len(late) == 11
    assert not any("call order" in w for w in insp["warnings"])


def test_communicator_ranks_become_global_ranks(tmp_path):
    """FSDP on 8 ranks: two shard communicators of 4 (ranks 0-3 and 4-7, each rank 0-3 within
    its own) and the world, recorded whole (NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES=0): group members
    and per-rank figures as the nsys report has them."""
    nsys, insp, calls = _both(tmp_path, gen_fsdp_8rank, 2, min_size=0)
    _same_summary(nsys, insp)
    assert {r["rank"]: (r["calls"], r["bytes"]) for r in insp["ranks"]} == {
        r["rank"]: (r["calls"], r["bytes"]) for r in nsys["ranks"]
    }
    shard = {c.comm.id for c in calls if c.comm.n_ranks == 4}
    assert len(shard) == 2 and all(c.comm.rank < 4 for c in calls if c.comm.id in shard)
    res = nsyscomm.load(tmp_path / "inspector", cache=False)
    members = set(res.collectives.query("group_size == 4")["group_ranks"])
    assert members == {"0,1,2,3", "4,5,6,7"}
    assert nsys["skew"]["straggler_rank"] == insp["skew"]["straggler_rank"]


def test_calls_under_the_minimum_size_are_absent_everywhere(tmp_path):
    """By default the plugin leaves out calls under 8192 bytes per rank: FSDP's 4096-byte world
    all_reduce is not in the dumps, on no rank (nothing is missing from one rank only), so the
    world communicator was never recorded and ranks follow host:pid, said in one line."""
    nsys, insp, _ = _both(tmp_path, gen_fsdp_8rank, 2)
    assert ("all_reduce", 4096, 8) in {_key(r) for r in nsys["summary"]}
    assert {_key(r) for r in insp["summary"]} == {_key(r) for r in nsys["summary"]} - {("all_reduce", 4096, 8)}
    assert not any("missing" in w for w in insp["warnings"])
    assert sum("no world communicator" in w for w in insp["warnings"]) == 1


def test_format_versions_and_compression(tmp_path):
    """v4.2 (coll_algo/coll_proto, a dump_stats record per communicator), gzip and .jsonl names."""
    nsys, insp, _ = _both(tmp_path, gen_ddp_4rank, 1, version="v4.2", gz=True, suffix=".jsonl")
    _same_summary(nsys, insp)
    assert all(p.name.endswith(".jsonl.gz") for p in (tmp_path / "inspector").iterdir())
    res = nsyscomm.load(tmp_path / "inspector", cache=False)
    assert set(res.collectives["algo"]) == {"RING"}


def test_without_verbose_timestamps_says_what_cannot_be_computed(tmp_path):
    nsys, insp, _ = _both(tmp_path, gen_ddp_4rank, 1, verbose=False)
    _same_summary(nsys, insp)
    lines = [w for w in insp["warnings"] if "verbose timestamps" in w]
    assert len(lines) == 1 and "lateness" in lines[0] and "arrival skew" in lines[0]
    assert insp["diagnosis"]["late"] == []  # no time known: nobody named late


def test_generated_lines_keep_the_plugins_key_order_and_formats(tmp_path):
    c = Call(
        "h/1", 7, Comm("0xab", 1, 2), "AllReduce", 3, 8192, 1_000_000_000, 1_000_004_000, (1_000_010_000, 1_000_018_999)
    )
    line = synth_inspector.record_line(c, dump_us=5)
    d = json.loads(line)
    assert list(d) == ["header", "metadata", "coll_perf"]
    assert list(d["header"]) == ["id", "comm_name", "rank", "n_ranks", "nnodes"]
    assert list(d["metadata"]) == [
        "inspector_output_format_version",
        "git_rev",
        "rec_mechanism",
        "dump_timestamp_us",
        "hostname",
        "pid",
    ]
    perf = d["coll_perf"]
    assert list(perf)[:7] == [
        "coll",
        "coll_sn",
        "coll_msg_size_bytes",
        "coll_exec_time_us",
        "coll_timing_source",
        "coll_algobw_gbs",
        "coll_busbw_gbs",
    ]
    assert perf["coll_exec_time_us"] == 8  # the GPU's 8.999 us, floored as the plugin divides
    assert '"hostname":"h\\/1"' in line and " " not in line  # json.cc escapes '/', writes no space
    assert '"coll_busbw_gbs":1.024000' in line  # %lf: 8192 B / 8 us x 2(n-1)/n


def _p2p_job() -> list[Call]:
    """World of 4 on two hosts; a pipeline communicator of global ranks 1 and 3 (1 is its rank 0):
    rank 1 sends 3 messages to rank 3, rank 3 sends 2 back."""
    world, pp = synth_inspector.comm_id("world"), synth_inspector.comm_id("pp")
    hosts = {0: ("a", 10), 1: ("a", 11), 2: ("b", 20), 3: ("b", 21)}
    t = 1_780_000_000_000_000_000
    calls = []
    for g, (host, pid) in hosts.items():
        calls.append(
            Call(host, pid, Comm(world, g, 4, 2), "AllReduce", 0, 1 << 20, t, t + 5 * US, (t + 10 * US, t + 60 * US))
        )
    t += 100_000 * US
    sn = {1: 0, 3: 0}

    def p2p(me: int, func: str, peer: int, k: int) -> Call:
        sn[me] += 1
        host, pid = hosts[me]
        s = t + k * 1000 * US
        return Call(
            host,
            pid,
            Comm(pp, [1, 3].index(me), 2, 2),
            func,
            sn[me],
            65536,
            s,
            s + 3 * US,
            (s + 8 * US, s + 40 * US),
            peer=peer,
        )

    for k in range(3):
        calls += [p2p(1, "Send", 1, k), p2p(3, "Recv", 0, k)]
    for k in range(3, 5):
        calls += [p2p(3, "Send", 0, k), p2p(1, "Recv", 1, k)]
    return calls


def test_point_to_point_peers_are_global_ranks(tmp_path):
    write_dumps(tmp_path, _p2p_job())
    c = nsyscomm.load(tmp_path, cache=False).collectives
    p2p = c[c.op.isin(["send", "recv"])]
    assert set(p2p["pair"]) == {"1-3"}
    assert sorted(p2p.query("op == 'send'")["rank"].tolist()) == [1, 1, 1, 3, 3]
    assert p2p.groupby("logical_id").size().tolist() == [2] * 5  # every message has its two sides


def test_dropped_records_are_counted_never_matched(tmp_path):
    """Rank 3's dump lacks the world's all_reduce sn 4 and one of rank 1's sends: the collective is
    seen on 3 ranks, the direction with unequal counts stays unpaired, and both are said."""
    calls = calls_from_reports(gen_ddp_4rank(1))
    gone = next(c for c in calls if c.truth["rank"] == 3 and c.func == "AllReduce" and c.sn == 4)
    write_dumps(tmp_path / "a", [c for c in calls if c is not gone])
    res = nsyscomm.load(tmp_path / "a", cache=False)
    col = res.collectives
    assert len(col) == len(calls) - 1
    seen = col.query("op == 'all_reduce' and seq == 4")
    assert sorted(seen["rank"]) == [0, 1, 2] and seen["logical_id"].nunique() == 1
    line = next(w for w in res.warnings if "missing" in w)
    assert "1 collective record(s)" in line and "rank 3: 1" in line

    p2p = _p2p_job()
    lost = next(c for c in p2p if c.func == "Send" and c.comm.rank == 0 and c.sn == 2)
    write_dumps(tmp_path / "b", [c for c in p2p if c is not lost])
    res = nsyscomm.load(tmp_path / "b", cache=False)
    sends = res.collectives.query("op == 'send' and rank == 1")
    assert sends["pair"].isna().all()  # 1 -> 3: two sends against three receives
    assert res.collectives.query("op == 'send' and rank == 3")["pair"].tolist() == ["1-3", "1-3"]
    assert any("5 point-to-point call(s) left unpaired" in w for w in res.warnings)


def test_no_world_communicator_ranks_by_host_and_pid(tmp_path):
    """Two communicators of two processes each, none of all four: ranks follow (host, pid)."""
    t = 1_780_000_000_000_000_000
    procs = [("b", 5, "x"), ("a", 9, "y"), ("a", 7, "x"), ("b", 3, "y")]
    calls = []
    for host, pid, comm in procs:
        me = [p for p in procs if p[2] == comm].index((host, pid, comm))
        cid = synth_inspector.comm_id(comm)
        calls.append(
            Call(host, pid, Comm(cid, me, 2, 2), "AllReduce", 0, 1 << 20, t, t + US, (t + 2 * US, t + 50 * US))
        )
    write_dumps(tmp_path, calls)
    res = nsyscomm.load(tmp_path, cache=False)
    lines = [w for w in res.warnings if "no world communicator" in w]
    assert lines == [
        "NCCL Inspector dumps: no world communicator recorded; ranks by host:pid: 0=a:7, 1=a:9, 2=b:3, 3=b:5"
    ]
    assert set(res.collectives["group_ranks"]) == {"3,0", "1,2"}  # in each communicator's rank order


def test_host_timed_records_and_plugin_drops_are_said(tmp_path):
    calls = calls_from_reports(gen_ddp_4rank(1))
    calls = [dataclasses.replace(c, timing="kernel_cpu") if c.sn == 0 and c.truth["rank"] == 0 else c for c in calls]
    write_dumps(tmp_path, calls, version="v4.2")
    dump = tmp_path / "node-a-pid4242.log"  # rank 0
    lines = dump.read_text().splitlines()
    stats = json.loads(lines[0])
    stats["dump_stats"]["coll_dropped_since_last_dump"] = 7
    dump.write_text("\n".join([json.dumps(stats, separators=(",", ":"))] + lines[1:]) + "\n")
    res = nsyscomm.load(tmp_path, cache=False)
    assert any("dropped 7 record(s)" in w for w in res.warnings)
    assert any("2 record(s) timed on the host" in w for w in res.warnings)


def test_a_folder_of_dumps_is_found_and_bad_lines_are_one_line(tmp_path):
    paths = write_dumps(tmp_path, calls_from_reports(gen_ddp_4rank(1)))
    assert discover.discover(tmp_path) == paths
    # a dump still being written: its last line, cut short, is left out
    with open(paths[0], "a") as f:
        f.write('{"header":{"id":"0x1"')
    assert len(nsyscomm.load(tmp_path, cache=False).collectives) == 64
    text = paths[1].read_text().replace('"coll_sn":3', '"coll_sn":-3', 1)
    paths[1].write_text(text)
    r = CliRunner().invoke(main, ["summarize", str(tmp_path), "--no-cache"])
    assert r.exit_code == 2, r.output
    assert "coll_sn" in r.output and paths[1].name in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_gzip_is_read_as_a_stream(tmp_path):
    paths = write_dumps(tmp_path, calls_from_reports(gen_ddp_4rank(1)), gz=True)
    assert gzip.open(paths[0]).readline().startswith(b'{"header":{"id":')
    assert len(nsyscomm.load(tmp_path, cache=False).collectives) == 64


def test_a_cached_dump_is_read_again_when_another_dump_changes(tmp_path, monkeypatch):
    """A dump's extract depends on its folder (ranks, records other ranks lack): the extract cache
    keys it by the other dumps too. The first dump (rank 3's) carries the folder's lines; rank 0's
    dump loses a record while rank 3's stays as it was."""
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(tmp_path / "cache"))
    calls = calls_from_reports(gen_ddp_4rank(1))
    write_dumps(tmp_path / "d", calls)
    first = nsyscomm.load(tmp_path / "d")
    assert not any("missing" in w for w in first.warnings)
    gone = next(c for c in calls if c.truth["rank"] == 0 and c.func == "AllReduce" and c.sn == 2)
    (tmp_path / "d" / "node-a-pid4242.log").unlink()
    write_dumps(tmp_path / "d", [c for c in calls if c is not gone and c.truth["rank"] == 0])
    again = nsyscomm.load(tmp_path / "d")
    assert any("rank 0: 1" in w for w in again.warnings)


@pytest.mark.parametrize(
    "edit,says",
    [
        (lambda d: d.pop("header"), "no header object"),
        (lambda d: d["header"].update(rank=9), "header.rank"),
        (lambda d: d["coll_perf"].update(coll_exec_time_us=1.5), "coll_exec_time_us"),
        (lambda d: d["coll_perf"].update(coll_msg_size_bytes=1 << 60), "coll_msg_size_bytes"),
        (lambda d: d["metadata"].pop("inspector_output_format_version"), "no Inspector metadata"),
    ],
)
def test_a_bad_record_is_one_line_naming_the_file(tmp_path, edit, says):
    paths = write_dumps(tmp_path, calls_from_reports(gen_ddp_4rank(1)))
    lines = paths[2].read_text().splitlines()
    d = json.loads(lines[3])
    edit(d)
    lines[3] = json.dumps(d, separators=(",", ":"))
    paths[2].write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(main, ["summarize", str(tmp_path), "--no-cache"])
    assert r.exit_code == 2, r.output
    assert says in r.output and paths[2].name in r.output and "line 4" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
