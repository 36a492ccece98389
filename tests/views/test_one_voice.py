"""One voice across formats and words that point at the right rank.

Every format carries the same findings, each in its own idiom; one bandwidth unit (GB/s) in
all of them; sizes human-readable where people read them; a CSV of integers and rounded times.
The per-rank and per-step figures say what they include, and name the rank that is slow, which
generated jobs fix by construction (tests/support/job_shapes.py). Driven through the CLI."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import DATA, DONE_ENV, SAMPLES, done_ranks, job_did_its_work, run_job
from tests.support import job_shapes

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"
NODES = SAMPLES / "synthetic_nowrapper_2node"


def _out(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


def _csv(*args) -> list[dict]:
    return list(csv.DictReader(io.StringIO(_out(*args, "--format", "csv"))))


@pytest.fixture(scope="module")
def loop_job(tmp_path_factory):
    """8 iterations of a plain loop on 2 nodes x 2 ranks; rank 1 arrives 2 ms late at the first
    all-reduce of every iteration; one barrier after the loop."""
    d = tmp_path_factory.mktemp("loop")
    job_shapes.loop(d, nodes=2, per_node=2, iterations=8, late_rank=1, late_ns=2_000_000)
    return d


@pytest.mark.parametrize("inp", [DDP, NODES], ids=["ddp_4rank", "nowrapper_2node"])
def test_every_format_carries_the_same_findings(inp):
    doc = json.loads(_out("summarize", inp, "--format", "json"))
    text = _out("summarize", inp)
    md = _out("summarize", inp, "--format", "markdown")
    rows = _csv("summarize", inp)
    words = " ".join(r["text"] for r in rows if r["text"])
    tables = {r["table"] for r in rows}
    findings = [d for d in doc["warnings"]]
    if doc["skew"]["straggler_rank"] is not None:
        findings.append(f"straggler: rank {doc['skew']['straggler_rank']} kept the others waiting")
    findings += ["communication time per rank counts the time spent waiting"]
    flat = " ".join(text.split())  # the terminal wraps long lines
    for f in findings:
        f = " ".join(f.split())
        assert f in flat and f in " ".join(words.split()), f
        assert f.replace(">", "&gt;").replace("<", "&lt;") in " ".join(md.split()), f
    if "Diagnosis" in text:
        first = next(line.strip() for line in text.splitlines()[text.splitlines().index("Diagnosis") + 1 :])
        assert first in md and first in words and "diagnosis" in tables
    if "What-if" in text:
        assert "## What-if" in md and "what_if" in tables
    for t in ("summary", "ranks", "steps", "size_histogram"):
        assert (t in tables) == (t in ("summary", "ranks") or doc.get(t) not in (None, [])), t


def test_one_bandwidth_unit_everywhere(tmp_path):
    """The DDP sample's 10.31 MB all-reduce: 84.21 GB/s of bus bandwidth in every format."""
    doc = json.loads(_out("summarize", DDP, "--format", "json"))
    bw = next(r["busbw_GBps"] for r in doc["summary"] if r["bytes"] == 10813440)
    shown = f"{bw:.2f}"
    text = _out("summarize", DDP)
    md = _out("summarize", DDP, "--format", "markdown")
    assert "busbw_avg (GB/s)" in text and shown in text and f"{bw * 8:.2f}" not in text
    assert "busbw_avg (GB/s)" in md and shown in md
    row = next(r for r in _csv("summarize", DDP) if r["table"] == "summary" and r["bytes"] == "10813440")
    assert f"{float(row['busbw_GBps']):.2f}" == shown
    _out("report", DDP, "-o", tmp_path / "r.html")
    assert shown in (tmp_path / "r.html").read_text()


def test_sizes_read_alike_in_every_table(tmp_path):
    """The what-if keys say '25.0 MB' like every other table, never the raw bytes."""
    for fmt in ("text", "markdown"):
        out = _out("summarize", DDP, "--format", fmt)
        assert "all_reduce 25.0 MB train.py:88" in out, fmt
        assert "26214400" not in out and "10813440" not in out, fmt
    _out("report", DDP, "-o", tmp_path / "r.html")
    assert "op all_reduce 25.0 MB train.py:88" in (tmp_path / "r.html").read_text()


def test_csv_counts_are_integers_and_times_rounded():
    rows = _csv("summarize", DDP)
    for r in rows:
        for key in ("count", "calls", "ranks", "bytes", "group_size", "rank", "step"):
            assert r.get(key, "") == "" or re.fullmatch(r"\d+", r[key]), (key, r[key])
        for key in ("total_ms", "avg_ms", "comm_ms", "wait_ms"):
            assert r.get(key, "") == "" or re.fullmatch(r"\d+(\.\d{1,6})?", r[key]), (key, r[key])


def test_per_rank_lines_say_the_waiting_is_counted(loop_job):
    """The rank that communicates most is one that waits for rank 1; the lines say so, and the
    slow rank is the one with the least communication time, nearly none of it waiting."""
    text = _out("summarize", loop_job)
    assert "communication time per rank counts the time spent waiting for late ranks" in text
    lo = re.search(r"minimum communication time = [\d.]+ ms for rank (\d+) \(([\d.]+) ms of it waiting\)", text)
    hi = re.search(r"maximum communication time = [\d.]+ ms for rank (\d+) \(([\d.]+) ms of it waiting\)", text)
    assert lo and hi, text
    assert int(lo.group(1)) == 1 and float(lo.group(2)) < 1.0
    # every other rank waited 2 ms in each of the 8 iterations
    assert int(hi.group(1)) != 1 and float(hi.group(2)) >= 8 * 2.0


def test_steps_name_the_late_rank_and_say_where_a_step_begins(loop_job):
    """8 iterations: steps 1-7 each led by rank 1's lateness (step 0's late all-reduce is every
    rank's first call: start-up skew, which names no rank); step 8 holds the barrier
    after the loop, and the output says where a step begins."""
    rows = [r for r in _csv("summarize", loop_job) if r["table"] == "steps"]
    assert [int(r["step"]) for r in rows] == list(range(9))
    assert float(rows[0]["late_ms"]) < 0.1, rows[0]
    for r in rows[1:8]:
        assert r["late_rank"] == "1" and 1.9 < float(r["late_ms"]) < 2.2, r
    assert all(r["calls"] == "8" for r in rows[:8])
    assert rows[8]["calls"] == "4"  # the barrier after the loop: one more step
    for fmt in ("text", "markdown"):
        out = _out("summarize", loop_job, "--format", fmt)
        assert "step N begins at the N-th optimizer.step()" in out, fmt
        assert "busiest rank" not in out and "last to arrive" in out, fmt
    md = _out("summarize", loop_job, "--format", "markdown")
    table = md.split("## Per step")[1].split("\n\n")[1].splitlines()[2:]
    assert [line.split("|")[4].strip() for line in table][1:8] == ["1"] * 7


PLAIN_LOOP = DATA / "plain_loop_job.py"


@pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None,
    reason="nsys and torchrun are needed for the real run",
)
def test_real_plain_loop_steps_and_slow_rank(tmp_path):
    """A real 2-rank gloo job under `nsyscomm run` (tests/data/plain_loop_job.py): 8 iterations
    in which rank 1 sleeps 30 ms before the all_reduce, then a barrier. Steps 0-7 are the
    iterations, each led by rank 1; step 8 holds the barrier alone; the lines say so."""
    env = {k: v for k, v in os.environ.items() if k != "NSYSCOMM_HANG_TIMEOUT"}
    env[DONE_ENV] = str(tmp_path)
    r = run_job(tmp_path / "out", PLAIN_LOOP, options=("--format", "csv"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(tmp_path), 2), r.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    steps = [x for x in rows if x["table"] == "steps"]
    assert [int(x["step"]) for x in steps] == list(range(9)), steps
    assert all(x["calls"] == "2" for x in steps)  # one all_reduce per rank, and the barrier
    # rank 1 slept 30 ms before each all_reduce; in step 0 the ranks' start-up skew (up to
    # hundreds of ms, either rank) comes on top, so it may name either. The lateness is the
    # sleep less rank 0's own delays (a loaded machine takes up to half of it)
    for x in steps[1:8]:
        assert x["late_rank"] == "1" and float(x["late_ms"]) >= 10, x
    text = _out("summarize", r.out)
    # which rank communicates most depends on the start-up skew too: each line says its waiting
    assert "communication time per rank counts the time spent waiting for late ranks" in text
    for label in ("minimum", "maximum"):
        assert re.search(rf"{label} communication time = [\d.]+ ms for rank \d \([\d.]+ ms of it waiting\)", text)
    assert "step N begins at the N-th optimizer.step()" in text
