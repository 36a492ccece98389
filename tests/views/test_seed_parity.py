"""What the tools nsyscomm replaces offer, offered here, and labels that tell values apart:
`--steps` and `--ops` for every analysis (DeepSpeed's per-N-iterations summaries and prof_ops),
step boundaries on the trace (BytePS's timeline), mpitrace's per-rank table by op, an NCCL log
checked against the job, sizes that never share a label, the per-rank table's unknown sizes, one
heading per caller, and the HTML's step bars that never pass their step."""

from __future__ import annotations

import json
import random
import re
import warnings
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner

from nsyscomm import api
from nsyscomm.cli import main
from nsyscomm.views import diagnosis_html, text
from nsyscomm.views import findings as F
from nsyscomm.views.trace import build, event_name
from nsyscomm.views.units import human_bytes
from tests.conftest import REAL, SAMPLES

DDP = str(SAMPLES / "synthetic_ddp_4rank.sqlite")
GLOO = str(SAMPLES / "synthetic_gloo_cpu.sqlite")
NOWRAPPER = str(SAMPLES / "synthetic_nowrapper_2node")
LOG_16 = REAL / "nccl-logs" / "aws-p5-h100-16rank-nccl-debug-info.log"
LOG_4 = REAL / "nccl-logs" / "alps-gh200" / "job-n-00004-N-0001-142995.out"


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["summarize", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# ---------------------------------------------------------------- labels
def test_two_sizes_never_share_a_label():
    assert human_bytes(1_048_576) == "1.0 MB" and human_bytes(26_214_400) == "25.0 MB"  # DeepSpeed's, when exact
    assert human_bytes(1_051_648) != human_bytes(1_048_576)
    assert event_name({"op": "all_reduce", "bytes": 1_051_648}) != event_name({"op": "all_reduce", "bytes": 1_048_576})
    rng = random.Random(0)
    seen: dict[str, int] = {}
    for n in [rng.randrange(1, 1 << 40) for _ in range(10_000)] + [2**k + d for k in range(60) for d in (-1, 0, 1)]:
        if n > 0:
            assert seen.setdefault(human_bytes(n), n) == n, (human_bytes(n), n, seen[human_bytes(n)])


def test_unknown_sizes_print_as_unknown_in_the_per_rank_table():
    doc = _json(NOWRAPPER)
    assert all(r["bytes"] is None for r in doc["summary"]) and all(r["bytes"] is None for r in doc["ranks"])
    out = CliRunner().invoke(main, ["summarize", NOWRAPPER]).stdout
    per_rank = out[out.index("Per rank (mpitrace style)") : out.index("communication time per rank")]
    assert "0B" not in per_rank and "?" in per_rank


def test_by_caller_heads_each_caller_once():
    """Sizes of two callers of one op, interleaved: each (op, caller) is one block."""
    rows = pd.DataFrame(
        {
            "op": ["all_reduce"] * 4,
            "caller": [
                "ds_job.py:19 sync_calls",
                "ds_job.py:30 other",
                "ds_job.py:19 sync_calls",
                "ds_job.py:30 other",
            ],
            "bytes": [1024, 2048, 4096, 8192],
            "count": [1, 1, 1, 1],
        }
    )
    table = F.summary(SimpleNamespace(summarize=lambda by_caller: rows), by_caller=True)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(text.summary_table(table, by_caller=True))
    out = console.export_text()
    assert out.count("ds_job.py:19 sync_calls") == 1 and out.count("ds_job.py:30 other") == 1, out
    # the JSON's order is the table's: SQL orders a caller's sizes together too
    doc = _json(DDP, "--by", "caller")
    keys = [(r["op"], r["caller"]) for r in doc["summary"]]
    assert all(keys.index(k) == i or keys[i - 1] == k for i, k in enumerate(keys))


# ---------------------------------------------------------------- --steps and --ops
def test_steps_and_ops_cut_every_table():
    whole = _json(DDP)
    part = _json(DDP, "--steps", "1:3")
    assert [s["step"] for s in part["steps"]] == [1, 2]
    for got, want in zip(part["steps"], whole["steps"][1:3]):
        for key in ("calls", "comm_ms", "late_rank", "late_ms", "max_skew_ms"):
            assert got[key] == pytest.approx(want[key]), key
    assert sum(r["calls"] for r in part["summary"]) == sum(s["calls"] for s in part["steps"])
    assert sum(r["calls"] for r in part["ranks"]) == sum(s["calls"] for s in part["steps"])
    ops = _json(DDP, "--ops", "broadcast")
    assert {r["op"] for r in ops["summary"]} == {"broadcast"} and {r["op"] for r in ops["rank_ops"]} == {"broadcast"}
    both = _json(DDP, "--ops", "all_reduce,broadcast", "--steps", "4")
    assert {s["step"] for s in both["steps"]} == {4}
    # elapsed is the range's: % comm stays a share of the time looked at
    assert all(r["comm_pct"] <= 100 for r in part["ranks"])
    assert max(r["elapsed_ms"] for r in part["ranks"]) < min(r["elapsed_ms"] for r in whole["ranks"])


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ops", "all_gather"], "not an op of this job (its ops: all_reduce, broadcast)"),
        (["--steps", "10:12"], "no calls there (the job's steps are 0 to 4)"),
        (["--steps", "3:1"], "empty"),
    ],
)
def test_a_selection_of_nothing_is_refused_in_one_line(args, words, tmp_path):
    for cmd in (["summarize"], ["trace", "-o", str(tmp_path / "t.json")], ["report", "-o", str(tmp_path / "r.html")]):
        r = CliRunner().invoke(main, [*cmd, DDP, *args])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, (cmd, r.output)
    assert not list(tmp_path.iterdir())
    r = CliRunner().invoke(main, ["summarize", NOWRAPPER, "--steps", "1:2"])
    assert r.exit_code == 2 and "record no training steps" in r.output


def test_report_takes_the_same_selection(tmp_path):
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", DDP, "--ops", "broadcast", "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "broadcast" in page and ">all_reduce<" not in page


# ---------------------------------------------------------------- the trace's steps
def test_the_trace_marks_every_ranks_steps():
    result = api.load([DDP])
    doc = build(result)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    ranks = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "collective"}
    assert {(e["pid"], e["args"]["step"]) for e in steps} == {(r, s) for r in ranks for s in range(5)}
    named = {
        (e["pid"], e["tid"])
        for e in doc["traceEvents"]
        if e.get("name") == "thread_name" and e["args"]["name"] == "steps"
    }
    assert {(e["pid"], e["tid"]) for e in steps} == named
    for r in ranks:  # one rank's steps follow each other
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in steps if e["pid"] == r)
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(mine, mine[1:]))
    assert [s["step"] for s in doc["otherData"]["steps"]] == [0, 1, 2, 3, 4]
    assert doc["otherData"]["step_range"] is None


# ---------------------------------------------------------------- mpitrace's per-rank table by op
def test_per_rank_table_by_op_adds_up_to_the_per_rank_table():
    doc = _json(DDP)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    by = pd.DataFrame(doc["rank_ops"])
    assert sorted(by["rank"].unique()) == sorted(ranks)
    for rank, g in by.groupby("rank"):
        assert g["calls"].sum() == ranks[rank]["calls"]
        assert g["bytes"].sum() == ranks[rank]["bytes"]
        assert (g["wait_ms"] <= g["time_ms"] + 1e-9).all()
    out = CliRunner().invoke(main, ["summarize", DDP, "--format", "markdown"]).stdout
    assert "## Per rank and op (mpitrace style)" in out


# ---------------------------------------------------------------- --nccl-log
@pytest.mark.skipif(not LOG_16.exists(), reason="the real NCCL logs (../shared/real) are absent")
def test_an_nccl_log_of_another_job_is_named_in_one_line():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning reaches the user
        r = CliRunner().invoke(main, ["summarize", GLOO, "--nccl-log", str(LOG_16)])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "not this job's NCCL log" in ln]
    assert len(lines) == 1 and "16 ranks against the job's 2" in lines[0] and "gloo" in lines[0], r.output
    assert "inf" not in re.sub(r"\w*inf\w+|\winfo", "", r.output.lower()), r.output
    if LOG_4.exists():  # a 4-rank, 1-node log beside a 4-rank, 1-node job: nothing to say
        r = CliRunner().invoke(main, ["summarize", DDP, "--nccl-log", str(LOG_4)])
        assert r.exit_code == 0 and "not this job's NCCL log" not in r.output, r.output


def test_a_reference_rate_of_zero_compares_nothing():
    from nsyscomm.analyses.vs_reference import compare

    curve = pd.DataFrame({"op": ["all_reduce"] * 3, "bytes": [8, 1024, 1 << 20], "busbw_GBps": [0.0, 0.5, 50.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = compare(pd.DataFrame({"op": ["all_reduce"] * 3, "bytes": [8, 512, 4096], "busbw_GBps": [0.1] * 3}), curve)
    assert out["busbw_vs_ref"].isna().tolist() == [True, True, False]


# ---------------------------------------------------------------- the HTML's step bars
def test_a_step_bar_never_passes_its_step():
    """The mean rank's waiting plus exposed time can pass its step (2,400 ms of waiting in a
    634 ms step): the bar stops at the step, and a note says so."""
    fake = SimpleNamespace(
        what_if=[{"steps": [{"step": 0, "step_ms_before": 634.0}, {"step": 1, "step_ms_before": 700.0}]}],
        step_breakdown=pd.DataFrame({"step": [0, 1], "wait_ms": [2400.0, 100.0], "exposed_ms": [50.0, 20.0]}),
        warmup={"steps": []},
    )
    svg = diagnosis_html.waterfall(fake)
    assert svg is not None
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="[\d.]+" height="([\d.]+)"[^>]*><title>step (\d+)', svg)
    height: dict[int, float] = {}
    for _, h, step in bars:
        height[int(step)] = height.get(int(step), 0.0) + float(h)
    # heights scale with ms: the steps' bars stand as 634 to 700
    assert height[0] / height[1] == pytest.approx(634 / 700, rel=0.01)
    assert "Cut to the step: step 0" in svg and "2400.000 ms waiting in a 634.000 ms step" in svg


def test_the_gate_cuts_both_sides_alike():
    r = CliRunner().invoke(main, ["gate", DDP, "--baseline", DDP, "--ops", "broadcast", "--format", "json"])
    assert r.exit_code == 0, r.output
    verdict = json.loads(r.stdout)
    assert "1 key(s) compared" in verdict["headline"]


KINETO = REAL / "kineto" / "nccl_data.json.gz"


@pytest.mark.skipif(not (LOG_16.exists() and KINETO.exists()), reason="the real data set (../shared/real) is absent")
def test_an_nccl_log_of_another_nccl_version_is_named():
    """A PyTorch profiler trace names its NCCL (2.17.1); the 16-rank log is NCCL 2.22.3."""
    r = CliRunner().invoke(main, ["summarize", str(KINETO), "--nccl-log", str(LOG_16)])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if "not this job's NCCL log" in ln)
    assert "NCCL 2.22.3 against the reports' 2.17.1" in line, line
