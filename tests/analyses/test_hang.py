"""Hang/desync diagnosis on generated jobs (tests/support/hang_samples.py: ground truth by
construction), the flight record's file, and real Flight Recorder dumps (shared/real)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from nsyscomm.analyses.hang import lines
from nsyscomm.api import load
from nsyscomm.capture import flight_record as fr
from nsyscomm.errors import InputError
from tests.conftest import DATA, real_file, torchrun_cmd
from tests.support import hang_samples as hs

CALLER = "train.py:10 step"
STUCK = "train.py:12 other"


def _nsyscomm(*args):
    return subprocess.run([sys.executable, "-m", "nsyscomm.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory):
    """Rank 1 stops after seq 2 (its process still running when the records were read: killed);
    ranks 0, 2, 3 entered seq 3 and never finished it."""
    out = tmp_path_factory.mktemp("hung")
    ok3 = hs.ok_calls(3)
    calls = {
        0: ok3 + [("all_reduce", 4096, "float32", CALLER, False)],
        1: ok3[:2] + [("all_reduce", 4096, "float32", STUCK, True)],
        2: ok3 + [("all_reduce", 4096, "float32", CALLER, False)],
        3: ok3 + [("all_reduce", 4096, "float32", CALLER, False)],
    }
    hs.write_job(out, calls, records=True, states={0: fr.STOPPED, 1: fr.STOPPED, 2: fr.STOPPED, 3: fr.STOPPED})
    return out


def test_hung_job_names_missing_rank_and_its_last_call(hung_job):
    h = load([hung_job / "report.sqlite"], cache=False).hang
    assert h["status"] == "hung"
    assert len(h["blocked"]) == 1
    b = h["blocked"][0]
    assert (b["group"], b["seq"], b["op"], b["bytes"], b["waiting_ranks"]) == ("0", 3, "all_reduce", 4096, [0, 2, 3])
    assert [(m["rank"], m["last_op"], m["last_seq"], m["caller"], m["state"]) for m in b["missing_ranks"]] == [
        (1, "all_reduce", 2, STUCK, "stopped")
    ]
    assert h["mismatches"] == []
    front = {(f["rank"]): (f["last_entered"], f["last_finished"]) for f in h["frontier"]}
    assert front == {0: (3, 2), 1: (2, 2), 2: (3, 2), 3: (3, 2)}


def test_a_call_that_never_completed_has_no_latency(hung_job):
    """Ranks 0, 2 and 3 entered seq 3 and never finished it (nsys closed its ranges at the
    process's end, 20 steps later; the flight records say unfinished): it is the hang section's,
    not a latency. The summary holds seqs 0-2 alone, each STEP/2 on every rank; nothing counts the
    stuck call's 20 steps as communication, waiting or lateness."""
    res = load([hung_job / "report.sqlite"], cache=False)
    c = res.collectives.set_index(["rank", "seq"])
    assert not c.loc[[(0, 3), (2, 3), (3, 3)], "completed"].any() and c.drop(index=3, level="seq")["completed"].all()
    (row,) = res.summary.to_dict("records")
    assert (row["op"], row["count"], row["calls"]) == ("all_reduce", 3, 12)
    assert row["total_ms"] == pytest.approx(3 * hs.STEP / 2 / 1e6) and row["max_ms"] == pytest.approx(hs.STEP / 2 / 1e6)
    assert res.ranks["comm_ms"].max() < 3 * hs.STEP / 1e6
    assert res.late.empty or (res.late["seq"] != 3).all()
    assert res.hang["blocked"][0]["seq"] == 3  # still the hang diagnosis's


def test_text_and_json_show_the_diagnosis_first(hung_job):
    r = _nsyscomm("summarize", str(hung_job / "report.sqlite"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("HANG DIAGNOSIS: the job HUNG")
    assert "missing rank 1: last call all_reduce seq 2 at train.py:12 other" in r.stdout
    assert "straggler:" not in r.stdout
    md = _nsyscomm("summarize", "--format", "markdown", str(hung_job / "report.sqlite"))
    # the headline, then the diagnosis before any table
    assert md.stdout.startswith("# nsyscomm") and md.stdout.split("\n## ")[1].startswith("Hang diagnosis")
    js = json.loads(_nsyscomm("summarize", "--format", "json", str(hung_job / "report.sqlite")).stdout)
    assert js["schema"] == 3
    assert js["hang"] == {
        "status": "hung",
        "blocked": [
            {
                "group": "0",
                "seq": 3,
                "op": "all_reduce",
                "bytes": 4096,
                "waiting_ranks": [0, 2, 3],
                "missing_ranks": [
                    {
                        "rank": 1,
                        "last_op": "all_reduce",
                        "last_seq": 2,
                        "caller": STUCK,
                        "state": "stopped",
                        "waiting_in": None,
                    }
                ],
            }
        ],
        "mismatches": [],
    }


def test_gate_fails_on_hung_run_and_names_it(hung_job, tmp_path):
    good = tmp_path / "good"
    hs.write_job(good, {r: hs.ok_calls(4) for r in range(4)}, records=True)
    r = _nsyscomm("gate", str(hung_job / "report.sqlite"), "--baseline", str(good / "report.sqlite"))
    assert r.returncode == 1
    assert "the run hung" in r.stderr and "missing rank(s) 1" in r.stderr
    ok = _nsyscomm("gate", str(good / "report.sqlite"), "--baseline", str(good / "report.sqlite"))
    assert ok.returncode == 0, ok.stderr


def test_a_hung_run_against_itself_fails_in_the_library_as_in_the_cli(hung_job):
    """Against itself every number is unchanged; the hang alone fails it, whether the gate is
    run through nsyscomm.api or the command (the CLI only prints the library's verdict)."""
    from click.testing import CliRunner

    from nsyscomm.api import run_gate
    from nsyscomm.cli import main

    report = str(hung_job / "report.sqlite")
    verdict = run_gate([report], [report])
    assert verdict.exit_code == 1 and verdict.hang and "missing rank(s) 1" in verdict.hang
    assert not verdict.failing and verdict.to_dict()["status"] == "fail"
    assert verdict.headline().startswith("FAIL: ")
    out = CliRunner().invoke(main, ["gate", report, "--baseline", report])
    assert out.exit_code == 1 and "the run hung" in out.output, out.output


def test_gate_reads_a_hung_runs_json_summary_once(hung_job, tmp_path, monkeypatch):
    """The current run given as a JSON summary: read once for both the comparison and the hang
    check, and it fails on the hang; a 'hang' key nsyscomm did not write is a one-line exit 2."""
    from click.testing import CliRunner

    from nsyscomm.cli import main

    good = tmp_path / "good"
    hs.write_job(good, {r: hs.ok_calls(4) for r in range(4)}, records=True)
    summary = tmp_path / "hung.json"
    r = _nsyscomm("summarize", str(hung_job / "report.sqlite"), "--format", "json")
    summary.write_text(r.stdout)
    base = tmp_path / "good.json"
    base.write_text(_nsyscomm("summarize", str(good / "report.sqlite"), "--format", "json").stdout)
    reads = []
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: reads.append(str(p)) or real(p, *a, **k))
    out = CliRunner().invoke(main, ["gate", str(summary), "--baseline", str(base)])
    assert out.exit_code == 1, out.output
    assert "the run hung" in out.output and "missing rank(s) 1" in out.output
    assert reads.count(str(summary)) == 1
    doc = json.loads(summary.read_text())
    doc["hang"] = {"status": "hung", "blocked": [{"group": "0"}], "mismatches": []}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = CliRunner().invoke(main, ["gate", str(bad), "--baseline", str(base)])
    assert out.exit_code == 2 and str(bad) in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output


def test_size_and_dtype_mismatch_from_reports_alone(tmp_path):
    calls = {r: hs.ok_calls(4) for r in range(4)}
    calls[2] = calls[2][:2] + [("all_reduce", 8192, "float32", CALLER, True), calls[2][3]]
    calls[3] = calls[3][:3] + [("all_reduce", 4096, "bfloat16", CALLER, True)]
    h = load([hs.write_job(tmp_path, calls, records=False)], cache=False).hang
    assert h["status"] == "desynced"
    got = {(m["seq"], m["field"]): m["values_by_rank"] for m in h["mismatches"]}
    assert got == {
        (2, "bytes"): {"0": 4096, "1": 4096, "2": 8192, "3": 4096},
        (3, "dtype"): {"0": "float32", "1": "float32", "2": "float32", "3": "bfloat16"},
    }


def test_op_mismatch_and_aborted_rank(tmp_path):
    calls = {r: hs.ok_calls(3) for r in range(4)}
    calls[0] = calls[0][:2] + [("broadcast", 4096, "float32", CALLER, False)]
    calls[1] = calls[1][:2] + [("all_reduce", 4096, "float32", CALLER, False)]
    h = load([hs.write_job(tmp_path, calls, records=True, states={1: fr.RUNNING})], cache=False).hang
    assert h["status"] == "desynced"
    assert [(m["seq"], m["field"], m["values_by_rank"]["0"]) for m in h["mismatches"]] == [(2, "op", "broadcast")]
    assert {p["rank"]: p["state"] for p in h["processes"]}[1] == "aborted"


def test_rank_that_raised_makes_the_run_aborted(tmp_path):
    calls = {r: hs.ok_calls(3) + [("all_reduce", 4096, "float32", CALLER, False)] for r in (0, 1, 2)}
    calls[3] = hs.ok_calls(3)
    h = load([hs.write_job(tmp_path, calls, records=True, states={3: fr.RAISED, 0: fr.RUNNING})], cache=False).hang
    assert h["status"] == "aborted"
    m = h["blocked"][0]["missing_ranks"]
    assert [(x["rank"], x["state"], x["last_seq"]) for x in m] == [(3, "raised", 2)]


def test_clean_jobs_are_ok(tmp_path):
    h = load([hs.write_job(tmp_path, {r: hs.ok_calls(5) for r in range(4)}, records=True)], cache=False).hang
    assert h == {**h, "status": "ok", "blocked": [], "mismatches": []}
    for job in __import__("nsyscomm.api", fromlist=["sample_jobs"]).sample_jobs():
        assert load([job]).hang["status"] == "ok", job


# ---------------------------------------------------------------- the record itself


@pytest.mark.parametrize("python_ring", [False, True])
def test_ring_survives_sigkill_and_wraps(tmp_path, python_ring):
    """A child writes 100 calls (ring of 64) and is SIGKILLed inside the 101st."""
    code = f"""
import os, signal
os.environ['NSYSCOMM_RECORD_DIR'] = {str(tmp_path)!r}
os.environ['RANK'] = '5'
os.environ['NSYSCOMM_RING_PY'] = {"1" if python_ring else "0"!r}
from nsyscomm.capture import flight_record as fr
from nsyscomm import nvtx_format as f
push, pop, raising = fr.chain(lambda m: None, lambda: None)
for i in range(101):
    push('nsyscomm.step|step=1')   # not a collective: not recorded
    push(f.format_collective('all_reduce', api='all_reduce', bytes=i, dtype='float32', numel=i, pg=0, gsize=2,
                             seq=i, caller='x.py:1 f'))
    if i < 100:
        pop()
        pop()
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    ring = fr.read_ring(tmp_path / "rank5.ring")
    assert (ring.rank, ring.state, ring.entered, ring.finished) == (5, "aborted", 101, 100)
    assert [int(c.fields["seq"]) for c in ring.calls] == list(range(37, 101))
    assert all(c.finished for c in ring.calls[:-1]) and not ring.calls[-1].finished
    assert ring.calls[-1].fields["caller"] == "x.py:1 f"


@pytest.mark.parametrize("python_ring", [False, True])
def test_ring_flags_a_call_left_by_an_exception(tmp_path, python_ring):
    """raising() before a pop flags that call only: it ended (the header counts it) but never
    completed; the flag is cleared when its slot is written again, and a pop of a range that is
    not a collective consumes it."""
    code = f"""
import os
os.environ['NSYSCOMM_RECORD_DIR'] = {str(tmp_path)!r}
os.environ['RANK'] = '3'
os.environ['NSYSCOMM_RING_PY'] = {"1" if python_ring else "0"!r}
from nsyscomm.capture import flight_record as fr
from nsyscomm import nvtx_format as f
push, pop, raising = fr.chain(lambda m: None, lambda: None)
def call(i):
    push(f.format_collective('all_reduce', api='all_reduce', bytes=i, dtype='float32', numel=i, pg=0,
                             gsize=2, seq=i, caller='x.py:1 f'))
call(0); raising(); pop()                                   # seq 0 left by an exception
push('nsyscomm.step|step=1'); raising(); pop()              # not a collective: flag consumed
call(1); pop()                                              # seq 1 completes
for i in range(2, 66):  # seq 64 rewrites seq 0's slot
    call(i); pop()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    ring = fr.read_ring(tmp_path / "rank3.ring")
    assert (ring.entered, ring.finished) == (66, 66)
    assert all(c.finished and not c.raised for c in ring.calls)  # seq 0's slot was rewritten
    code = code.replace("range(2, 66)", "range(2, 3)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    ring = fr.read_ring(tmp_path / "rank3.ring")
    assert (ring.entered, ring.finished) == (3, 3)
    assert [(int(c.fields["seq"]), c.finished, c.raised) for c in ring.calls] == [
        (0, False, True),
        (1, True, False),
        (2, True, False),
    ]


_RAISES_IN_CALL = """
import os, tempfile
import torch
import torch.distributed as dist
from nsyscomm.capture import wrapper as W
W.annotate(True)
fd, path = tempfile.mkstemp(); os.close(fd); os.unlink(path)
dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
x = torch.ones(4)
dist.all_reduce(x)
try:  # raised inside torch's all_reduce, after the wrapper's push
    dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=dist.ReduceOp.MAX)
except ValueError as e:
    print("raised:", e)
dist.all_reduce(x)
dist.destroy_process_group()
"""


@pytest.mark.parametrize(("fastpath", "python_ring"), [("1", "0"), ("0", "0"), ("0", "1")])
def test_wrapped_collective_that_raises_is_recorded_unfinished(tmp_path, fastpath, python_ring):
    """A collective the wrapper annotated and torch left by an exception is entered, not
    finished, in the flight record, from the C fast path and the Python wrapper alike; the
    exception reaches the program unchanged."""
    pytest.importorskip("torch")
    env = dict(
        os.environ,
        NSYSCOMM_RECORD_DIR=str(tmp_path),
        RANK="0",
        NSYSCOMM_FASTPATH=fastpath,
        NSYSCOMM_RING_PY=python_ring,
    )
    p = subprocess.run([sys.executable, "-c", _RAISES_IN_CALL], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert "raised: all_reduce does not support" in p.stdout
    ring = fr.read_ring(tmp_path / "rank0.ring")
    assert [(int(c.fields["seq"]), c.finished, c.raised) for c in ring.calls] == [
        (0, True, False),
        (1, False, True),
        (2, True, False),
    ]


def test_ring_clean_exit_and_exception(tmp_path):
    for rank, body, state in ((1, "pass", "exited"), (2, "raise ValueError('bad thing')", "raised")):
        code = (
            f"import os; os.environ['NSYSCOMM_RECORD_DIR'] = {str(tmp_path)!r}; os.environ['RANK'] = '{rank}'\n"
            "from nsyscomm.capture import flight_record as fr\nfr.chain(lambda m: None, lambda: None)\n" + body
        )
        subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
        ring = fr.read_ring(tmp_path / f"rank{rank}.ring")
        assert ring.state == state
    assert fr.read_ring(tmp_path / "rank2.ring").note == "ValueError: bad thing"


# ---------------------------------------------------------------- Flight Recorder dumps

REFERENCE = {"gpu_error_1st": ("74", [12]), "lock_gil_1st": ("72", [9, 14])}


@pytest.mark.parametrize("scenario", sorted(REFERENCE))
def test_flight_recorder_dumps_match_reference(scenario):
    folder = real_file(f"flight_recorder/nvrx/{scenario}")
    ref = (folder / "reference_output.txt").read_text().splitlines()[1].split("|")
    group, missing = ref[0].strip(), [int(x) for x in ref[-1].strip().split(",")]
    assert (group, missing) == REFERENCE[scenario]  # the reference file says so
    h = load([folder], cache=False).hang
    assert h["status"] == "hung"
    first = h["blocked"][0]  # the first to block: what the reference analyser reports
    assert first["group"] == group and first["op"] == "all_to_all"
    assert [m["rank"] for m in first["missing_ranks"]] == missing
    # every other stuck communicator is missing only fault-injected ranks
    faults = {int(x) for x in (folder / "fault_injection.log").read_text().split("[", 1)[1].split("]")[0].split(",")}
    assert {m["rank"] for b in h["blocked"] for m in b["missing_ranks"]} <= faults


def test_flight_recorder_refuses_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    d = tmp_path / "dumps"
    d.mkdir()
    (d / "nccl_trace_rank_0").write_bytes(pickle.dumps({"version": "2.9", "pg_config": {}, "entries": [Evil()]}))
    from nsyscomm.ingest.flight_recorder import dump as flight_recorder

    with pytest.raises(InputError, match="not a Flight Recorder dump of plain data"):
        flight_recorder.load_dump(d / "nccl_trace_rank_0")
    r = _nsyscomm("summarize", str(d / "nccl_trace_rank_0"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "pwned" not in r.stdout


@pytest.mark.skipif(__import__("shutil").which("torchrun") is None, reason="torchrun is not on PATH")
def test_real_gloo_flight_recorder_dumps_made_here(tmp_path):
    """REAL RUN (no nsys): torch 2.13 records gloo collectives in its Flight Recorder; the dumps
    of a job whose rank 1 stopped name rank 1 missing from seq 4 (torch counts from 1)."""

    script = DATA / "fr_gloo_job.py"
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=str(dumps / "rank_"))
    for k in ("NSYSCOMM_ANNOTATE", "NSYSCOMM_RECORD_DIR"):
        env.pop(k, None)
    p = subprocess.run(
        torchrun_cmd(script, ranks=4),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert sorted(f.name for f in dumps.iterdir()) == [f"rank_{r}" for r in range(4)], p.stderr[-2000:]
    h = load([dumps], cache=False).hang
    assert h["status"] == "hung"
    (b,) = h["blocked"]
    assert (b["seq"], b["op"], b["waiting_ranks"]) == (4, "all_reduce", [0, 2, 3])
    (m,) = b["missing_ranks"]
    assert (m["rank"], m["last_op"], m["last_seq"]) == (1, "all_reduce", 3)
    assert m["caller"].startswith("fr_gloo_job.py:")


def test_one_rank_profiler_trace_is_not_a_desync():
    """HTA's nccl_data trace is rank 0 alone, its kernels sharing Seq values: no rank to differ
    from, so no mismatch (it was reported 'desynced', its values picked at random among a rank's
    calls at one seq)."""
    from nsyscomm.analyses.hang import contract

    h = contract(load([real_file("kineto/nccl_data.json.gz")]).hang)
    assert h["mismatches"] == [] and h["status"] != "desynced"


# ---------------------------------------------------------------- the mismatch query itself


def _mismatches_by_brute_force(calls: list[tuple]) -> set[tuple]:
    """(group, seq, field, rank) of sql/hang_mismatches.sql, from its rules written out in Python:
    a key held by two ranks or more, each once, whose non-empty values of a field differ."""
    by_key: dict[tuple, list[tuple]] = {}
    for c in calls:
        by_key.setdefault((c[1], c[4]), []).append(c)
    out = set()
    for (g, seq), rows in by_key.items():
        ranks = [r[0] for r in rows]
        if len(set(ranks)) < 2 or len(ranks) != len(set(ranks)):
            continue
        fields = {
            "op": [(r[0], r[5]) for r in rows],  # never empty: combine() leaves such calls out
            "bytes": [(r[0], str(r[6])) for r in rows if r[5] != "all_to_all" and r[6] is not None],
            "dtype": [(r[0], r[7]) for r in rows if r[7]],
            "group_membership": [(r[0], f"{r[2]}:{r[3]}") for r in rows if r[2] is not None],
        }
        for field, vals in fields.items():
            if len({v for _, v in vals}) > 1:
                out |= {(g, seq, field, rank) for rank, _ in vals}
    return out


def test_mismatch_query_finds_exactly_the_differing_keys():
    """Random calls with each kind of difference, all-to-all sizes, keys held once or twice by a
    rank, missing dtypes and group sizes: the query's rows are the brute-force reference's."""
    import random

    from nsyscomm import duck
    from nsyscomm.analyses.hang import mismatch_rows

    rng = random.Random(7)
    calls = []
    for g in ("0", "1"):
        for seq in range(400):
            base = (rng.choice(["all_reduce", "all_gather", "all_to_all"]), 4096, "float32", 4, "0,1,2,3")
            for rank in range(rng.choice([1, 2, 4, 4, 4])):
                op, size, dtype, gsize, granks = base
                kind = rng.random()
                if kind < 0.03:
                    op = "broadcast"
                elif kind < 0.06:
                    size = 8192
                elif kind < 0.09:
                    dtype = rng.choice(["bfloat16", "", None])
                elif kind < 0.12:
                    gsize, granks = rng.choice([(2, "0,1"), (None, "")])
                calls.append((rank, g, gsize, granks, seq, op, size, dtype))
                if rng.random() < 0.01:  # the same key twice on one rank: not compared
                    calls.append((rank, g, gsize, granks, seq, "broadcast", size, dtype))
    con = duck.connect()
    try:
        con.execute(
            'CREATE TABLE hang_calls (rank INTEGER, "group" VARCHAR, group_size INTEGER, group_ranks VARCHAR, '
            "seq BIGINT, op VARCHAR, bytes BIGINT, dtype VARCHAR)"
        )
        con.executemany("INSERT INTO hang_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?)", calls)
        got = list(mismatch_rows(con).itertuples(index=False, name=None))
    finally:
        con.close()
    want = _mismatches_by_brute_force(calls)
    assert len(want) > 100 and {f for *_, f, _ in want} == {"op", "bytes", "dtype", "group_membership"}
    assert {(g, seq, f, r) for g, seq, f, r, _ in got} == want
    assert len(got) == len(want)


def test_a_report_whose_only_open_calls_are_sends_takes_the_lone_path(monkeypatch):
    """The 2xH100 window export has two send kernels without their host ranges (no end on the
    host): no collective the diagnosis reads is left open, so the blocked-call and frontier
    queries are not run, and the diagnosis is still ok."""
    from nsyscomm import duck

    path = real_file("nsys/nsys2026.2_2xH100_nccl_window.sqlite")
    asked: list[str] = []
    real_sql = duck.sql

    def sql(name: str) -> str:
        asked.append(name)
        return real_sql(name)

    result = load([path], cache=False)
    open_ops = result.con.execute("SELECT DISTINCT op FROM collectives WHERE cpu_end IS NULL").fetchall()
    assert open_ops == [("send",)]
    monkeypatch.setattr(duck, "sql", sql)
    h = result.hang
    assert h["status"] == "ok" and h["blocked"] == [] and h["mismatches"] == []
    assert "hang_calls" in asked and "hang_blocked" not in asked and "hang_frontier" not in asked


def test_a_rank_stuck_outside_communication_is_the_root_not_the_first_blocked(tmp_path):
    """Each step an all_reduce on the world of 4 ranks, then one on the subgroup [1, 2]. Rank 1
    stops after the world's seq 2 (it calls nothing more): rank 2 waits in the subgroup's seq 2,
    ranks 0 and 3 go on to the world's seq 3 and wait there, entering it first. The world is blocked
    by ranks 1 and 2, but rank 2 only because it waits in the subgroup: the subgroup, blocked by
    rank 1 alone, is the root."""
    world = ("all_reduce", 1024, "float32", CALLER, True)
    sub = ("all_reduce", 2048, "float32", CALLER, True, 1, (1, 2))
    calls = {
        0: [world] * 3 + [world[:4] + (False,)],
        1: [world, sub] * 2 + [world],
        2: [world, sub] * 2 + [world, sub[:4] + (False,) + sub[5:]],
        3: [world] * 3 + [world[:4] + (False,)],
    }
    stopped = {r: fr.STOPPED for r in calls}
    h = load([hs.write_job(tmp_path, calls, records=True, states=stopped)], cache=False).hang
    assert h["status"] == "hung"
    got = [
        (b["group"], b["seq"], b["waiting_ranks"], [(m["rank"], m["waiting_in"]) for m in b["missing_ranks"]])
        for b in h["blocked"]
    ]
    assert got == [
        ("1", 2, [2], [(1, None)]),
        ("0", 3, [0, 3], [(1, None), (2, {"group": "1", "seq": 2, "op": "all_reduce"})]),
    ]
    text = "\n".join(lines(h))
    assert "missing rank 2: waiting in communicator 1 all_reduce seq 2" in text
    assert text.index("communicator 1: blocked") < text.index("communicator 0: blocked")
