"""What the statistics set aside: communicator setup, one-rank NCCL copies, warm-up
steps and start-up skew, on generated jobs whose truth is known by construction
(tests/support/setup_jobs.py, tests/support/whatif_jobs.py) and on the real 1xH100 export."""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner

from nsyscomm.analyses.contract import document
from nsyscomm.analyses.invariants import violations
from nsyscomm.api import load
from nsyscomm.cli import main
from tests.conftest import REAL_NSYS, ro
from tests.support import setup_jobs as sj
from tests.support import whatif_jobs as wj

MB4 = 4 * 1024 * 1024
STEPS = [[("all_reduce", MB4, True), ("all_gather", MB4, False)]] * 6
SLOW_STEP_NS = 40 * sj.MS  # step 1: a slow first step (allocator, autotuning)


def _job(tmp_path, n_ranks, **kw):
    path = tmp_path / "job.sqlite"
    truth = sj.write_job(path, n_ranks, STEPS, slow_steps={1: SLOW_STEP_NS}, **kw)
    return load([path], cache=False), truth


@pytest.mark.parametrize("nccl_ranges", [True, False], ids=["nccl_init_range", "first_call_rule"])
def test_setup_call_is_told_apart_and_left_out(tmp_path, nccl_ranges):
    res, truth = _job(tmp_path, 2, nccl_ranges=nccl_ranges)
    (want,) = truth["setup"]
    setup = res.setup
    assert len(setup) == 1
    row = setup.iloc[0]
    assert (row["op"], int(row["bytes"]), int(row["step"]), int(row["participants"])) == ("all_reduce", MB4, 0, 2)
    assert row["how"] == ("nccl_init" if nccl_ranges else "first_call")
    assert row["took_ms"] == pytest.approx(want["took_ns"] / 1e6, abs=1e-9)
    if nccl_ranges:
        assert row["init_ms"] == pytest.approx(want["init_ns"] / 1e6, abs=1e-9)
    else:
        assert row["init_ms"] != row["init_ms"] or row["init_ms"] is None  # NaN/None: NCCL said nothing
    # out of the summary (5 all_reduces of 6 left, each at the kernel's time), ranks and steps
    s = res.summary.set_index("op")
    assert int(s.loc["all_reduce", "count"]) == 5 and int(s.loc["all_gather", "count"]) == 6
    assert s.loc["all_reduce", "avg_ms"] == pytest.approx(sj.KERNEL_NS / 1e6, abs=1e-9)
    assert (res.ranks["calls"] == 11).all()
    assert res.ranks["comm_ms"].tolist() == pytest.approx([11 * sj.KERNEL_NS / 1e6] * 2, abs=1e-9)
    steps = res.steps.set_index("step")
    assert int(steps.loc[0, "calls"]) == 2  # the all_gather on both ranks
    doc = document(res)
    assert doc["setup"]["collectives"] == 1 and doc["setup"]["calls"] == 2
    assert "the gate" in doc["setup"]["note"]


def test_warm_up_steps_leave_the_what_if_job_figures(tmp_path):
    res, truth = _job(tmp_path, 2)
    step_ns = truth["step_ns"]
    # step 0 holds the setup call; step 1 took over 3x the median of steps 2-5; no later step did
    assert statistics.median(step_ns[2:]) * 3 < step_ns[1]
    w = res.warmup
    assert w["steps"] == [0, 1]
    assert [p["step_ms"] for p in w["per_step"]] == pytest.approx([n / 1e6 for n in step_ns[:2]], abs=1e-9)
    for row in res.what_if:
        assert row["warmup_steps"] == [0, 1]
        assert [s.get("warmup", False) for s in row["steps"]] == [True, True] + [False] * 4
        assert row["step_ms_before"] == pytest.approx(statistics.mean(step_ns[2:]) / 1e6, abs=1e-6)
    # the per-step table marks them, the text says what was set aside
    out = CliRunner().invoke(main, ["summarize", str(tmp_path / "job.sqlite"), "--no-cache"]).output
    per_step = out.split("Per step")[1].split("\n\n")[1].splitlines()
    marked = [line.split()[0] for line in per_step[2:] if "warm-up" in line]
    assert marked == ["0", "1"], per_step
    assert "setup: all_reduce 4.0 MB at step 0 on 2 rank(s)" in out


def test_a_slow_step_later_in_the_job_is_no_warm_up(tmp_path):
    path = tmp_path / "job.sqlite"
    sj.write_job(path, 2, STEPS, slow_steps={4: SLOW_STEP_NS})
    assert load([path], cache=False).warmup["steps"] == [0]  # the setup's step only


@pytest.mark.parametrize("fmt", ["sqlite", "arrow"])
def test_one_rank_job_takes_its_copies_as_device_time(tmp_path, fmt):
    res, truth = _job(tmp_path, 1)
    if fmt == "arrow":  # the same report as nsys's Arrow export: the same calls
        from tests.support.arrow_convert import convert

        res = load([convert(tmp_path / "job.sqlite", tmp_path / "job.arrow")], cache=False)
    calls = res.collectives
    gathers = calls[calls["op"] == "all_gather"]
    want = [c for c in truth["calls"] if c[2] == "all_gather"]
    assert gathers["gpu_start"].tolist() == [c[6] for c in want]
    assert gathers["gpu_end"].tolist() == [c[7] for c in want]
    assert (gathers["duration_ns"] == sj.COPY_NS).all()
    assert (gathers["stream"] == sj.NCCL_STREAM).all()
    # in place: nothing on the device, host time; the first (setup) call's only copies are the
    # init's, which are no transfer
    reduces = calls[calls["op"] == "all_reduce"]
    assert reduces["gpu_start"].isna().all()
    later = reduces[~reduces["setup"]]
    assert (later["duration_ns"] == sj.LAUNCH_NS + 5 * sj.US).all()
    assert reduces["setup"].tolist() == [True] + [False] * 5
    text = " ".join(res.warnings)
    assert "12 NCCL call(s) on one-rank communicators launched no kernel" in text
    assert "capture window edge" not in text and "not counted" not in text


def test_start_up_skew_names_no_rank_late_and_saves_nothing(tmp_path):
    """A gloo job as seen on a real host: 4 ranks whose processes reach the loop up to 157 ms apart; rank 2
    sleeps 50 ms before the all_reduce of each of 6 steps."""
    steps = [[("compute", r, 5 + (50 if r == 2 else 0)) for r in range(4)] + [("coll", (0, 1, 2, 3), 1.0, 0)]] * 6
    path = tmp_path / "gloo.sqlite"
    wj.write_job(path, 4, steps, start_ms={0: 0, 1: 157, 2: 60, 3: 20}, first_step=0)
    res = load([path], cache=False)
    st = res.startup
    assert st["collectives"] == 1
    assert st["max_skew_ms"] == pytest.approx(157 - 0, abs=1e-9)  # rank 1 (157 + 5) against rank 0 (0 + 5)
    late = res.late
    assert sorted(late["rank"].unique()) == [2] and len(late) == 5  # steps 2-6 only
    assert late["delay_ms"].tolist() == pytest.approx([50.0] * 5, abs=1e-9)
    assert res.skew["straggler_rank"] == 2 and res.skew["instances"] == 5
    ns = next(r for r in res.what_if if r["scenario"] == "no_straggler")
    # step 1's first collective keeps its start-up wait (rank 2's sleep lies inside it); steps 2-6
    # each save rank 2's 50 ms
    assert [s["saved_ms"] for s in ns["steps"]] == pytest.approx([0.0] + [50.0] * 5, abs=1e-6)
    assert ns["total_saved_ms"] == pytest.approx(250.0, abs=1e-6)
    assert res.warmup["steps"] == []  # step 1 (158 ms) is under 3x the later steps' 56 ms
    lines = " ".join(document(res)["diagnosis"]["what_if_notes"])
    assert "start-up" in lines


ONE_GPU = REAL_NSYS / "nsys2025.3_1xH100_nccl2.28_run_light.sqlite"


@pytest.mark.skipif(not ONE_GPU.exists(), reason=f"{ONE_GPU} is absent (../shared/real)")
def test_real_one_gpu_export_sets_aside_nccl_init():
    path = ONE_GPU
    res = CliRunner().invoke(main, ["summarize", str(path), "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (row,) = doc["setup"]["rows"]
    # the export's first collective: an 8-byte all_gather at step 0 holding ncclCommInitRankConfig
    assert (row["op"], row["bytes"], row["step"], row["how"]) == ("all_gather", 8, 0, "nccl_init")
    assert row["took_ms"] == pytest.approx(395.271812, abs=1e-6)
    assert row["init_ms"] == pytest.approx(390.918454, abs=1e-6)
    # the same two spans read straight from the export with sqlite3: the first wrapper range (the
    # 8-byte all_gather) and NCCL's ncclCommInitRankConfig range
    with ro(path) as con:
        spans = con.execute(
            """SELECT coalesce(n.text, s.value), n."end" - n.start FROM NVTX_EVENTS n
            LEFT JOIN StringIds s ON s.id = n.textId
            WHERE coalesce(n.text, s.value) LIKE 'nsyscomm:%' OR coalesce(n.text, s.value) = 'ncclCommInitRankConfig'
            ORDER BY n.start"""
        ).fetchall()
    first = spans[0]
    init = [ns for name, ns in spans if name == "ncclCommInitRankConfig"]
    assert first[0].startswith("nsyscomm:all_gather|") and "|bytes=8|" in first[0]
    assert row["took_ms"] == pytest.approx(first[1] / 1e6, abs=1e-6)
    assert len(init) == 1 and row["init_ms"] == pytest.approx(init[0] / 1e6, abs=1e-6)
    assert not [r for r in doc["summary"] if r["op"] == "all_gather" and r["bytes"] == 8]
    assert doc["ranks"][0]["comm_ms"] < 30  # setup calls, once counted, made it many times that
    assert 0 in doc["warmup"]["steps"]
    # the 4 MB all_gathers: each NCCL's one device copy on its stream (7), not the host range
    gathers = [r for r in doc["summary"] if r["op"] == "all_gather" and r["bytes"] == 4194304]
    assert gathers[0]["count"] == 12 and gathers[0]["avg_ms"] < 0.01
    text = " ".join(doc["warnings"])
    assert "373 NCCL call(s) on one-rank communicators launched no kernel" in text
    assert "capture window edge" not in text


def test_html_charts_scale_to_the_steady_steps(tmp_path):
    """The warm-up steps (0: setup; 1: 40 ms slower) neither set the per-step charts' scale nor
    go unmarked: labelled w, a bar past the scale cut at the top with its value; the page says
    what was set aside."""
    from nsyscomm.views import html_report

    res, truth = _job(tmp_path, 2)
    page = html_report.render(res)
    assert "<b>Set aside</b>" in page and "setup: all_reduce 4.0 MB at step 0" in page
    for label in (">0w<", ">1w<"):
        assert page.count(label) >= 2  # the waterfall and the what-if chart
    assert ">2w<" not in page and ">2<" in page
    # steps 0 (its call's execution counts NCCL's init) and 1 past the scale in both charts
    assert page.count('class="cut"') == 4
    steady_ms = max(truth["step_ns"][2:]) / 1e6
    for warm in truth["step_ns"][:2]:
        assert f"{warm / 1e6:.3f} ms" in page and steady_ms < warm / 1e6


def test_a_damaged_copy_table_leaves_the_host_time(tmp_path):
    """Text where a copy's start should be: the calls keep their host time, one warning says why."""
    import sqlite3

    path = tmp_path / "job.sqlite"
    sj.write_job(path, 1, [[("all_gather", MB4, False)]] * 3)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = 'abc' WHERE rowid = 1")
    con.commit()
    con.close()
    res = load([path], cache=False)
    assert res.collectives["gpu_start"].isna().all()
    assert [w for w in res.warnings if "device copies not read" in w]


def test_one_rank_job_without_the_wrapper_is_counted_from_nccl_ranges(tmp_path):
    """No wrapper: NCCL's own ranges are the calls (their kernels are not past the capture's end:
    the device works on after them); the out-of-place ones take their copy's time."""
    path = tmp_path / "job.sqlite"
    truth = sj.write_job(path, 1, STEPS, wrapper=False)
    res = load([path], cache=False)
    calls = res.collectives
    assert len(calls) == len(truth["calls"]) == 12
    gathers = calls[calls["op"] == "all_gather"]
    assert gathers["gpu_start"].tolist() == [c[6] for c in truth["calls"] if c[2] == "all_gather"]
    assert (gathers["duration_ns"] == sj.COPY_NS).all()
    reduces = calls[calls["op"] == "all_reduce"].sort_values("cpu_start")
    # NCCL's range: from the launch to 1 us before the wrapper's end would have been
    assert (reduces["duration_ns"].iloc[1:] == sj.LAUNCH_NS - sj.US).all()
    assert [w for w in res.warnings if "12 NCCL call(s) launched no kernel (a one-rank" in w]
    assert not [w for w in res.warnings if "capture's end" in w]


def test_nccl_calls_at_the_capture_end_are_not_counted(tmp_path):
    """Without the wrapper, an NCCL call after which its process launched nothing may have its
    kernel past the capture's end: not counted, and said so."""
    import sqlite3

    path = tmp_path / "job.sqlite"
    sj.write_job(path, 1, STEPS, wrapper=False)
    con = sqlite3.connect(path)  # the capture ends after the last step's calls: no later launch
    last = con.execute("SELECT max(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start = ?", (last,))
    con.commit()
    con.close()
    res = load([path], cache=False)
    assert len(res.collectives) == 11  # the last all_gather (its copy launched inside it) is out
    assert [w for w in res.warnings if "1 NCCL call(s) at the capture's end launched no kernel" in w]


def test_nccl_log_init_timings_join_the_setup(tmp_path):
    """NCCL_DEBUG=INFO's "Init timings" lines (both wordings) give the communicators' setup time."""
    from nsyscomm.ingest import nccl_log

    log = tmp_path / "nccl.log"
    log.write_text(
        "h:27:66 [2] NCCL INFO Init timings: rank 0 nranks 2 total 3.38 (kernels 0.24, bootstrap 2.40, rest 0.00)\n"
        "h:28:71 [3] NCCL INFO Init timings - ncclCommInitRankConfig: rank 1 nranks 2 total 1.25 (kernels 0.2)\n"
    )
    parsed = nccl_log.parse(log)
    assert parsed.init_timings == [
        {"rank": 0, "nranks": 2, "total_s": 3.38},
        {"rank": 1, "nranks": 2, "total_s": 1.25},
    ]
    path = tmp_path / "job.sqlite"
    sj.write_job(path, 2, STEPS)
    res = CliRunner().invoke(main, ["summarize", str(path), "--nccl-log", str(log), "--no-cache", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["setup"]["nccl_log_init_s"] == 3.38
    text = CliRunner().invoke(main, ["summarize", str(path), "--nccl-log", str(log), "--no-cache"]).output
    assert "NCCL's log (Init timings) gives 2 communicator init(s), the longest 3.38 s" in text


def _whatif_step0_saved(res, scenario: str) -> float:
    row = next(r for r in res.what_if if r["scenario"] == scenario)
    (step0,) = [s for s in row["steps"] if s["step"] == 0]
    return step0["saved_ms"]


def test_a_rank_late_to_the_nccl_init_call_stays_late(tmp_path):
    """Rank 1 comes 300 ms late to the first all_reduce, which holds NCCL's init: the init is
    collective, so rank 0's init range lasts those 300 ms longer and both kernels start together.
    Only the init is setup: rank 1 is named late by 300 ms, rank 0's wait counts, the what-if's
    no_straggler saves it (in warm-up step 0, which holds the setup call)."""
    late = 300 * sj.MS
    path = tmp_path / "job.sqlite"
    sj.write_job(path, 2, STEPS, late_ns={1: late})
    res = load([path], cache=False)
    assert len(res.setup) == 1 and res.setup.iloc[0]["how"] == "nccl_init"  # still setup: its time
    (row,) = res.late.to_dict("records")
    assert (row["rank"], row["op"], row["step"]) == (1, "all_reduce", 0)
    assert row["delay_ms"] == pytest.approx(late / 1e6, abs=1e-6)
    ranks = res.ranks.set_index("rank")
    assert ranks.loc[0, "wait_ms"] == pytest.approx(late / 1e6, abs=1e-6)
    assert ranks.loc[1, "wait_ms"] == pytest.approx(0.0, abs=1e-6)
    assert (ranks["calls"] == 11).all()  # the setup call is still no call of the statistics
    steps = res.steps.set_index("step")
    assert int(steps.loc[0, "late_rank"]) == 1 and steps.loc[0, "late_ms"] == pytest.approx(late / 1e6, abs=1e-6)
    assert res.startup["collectives"] == 0  # both ranks started together: no start-up explains it
    assert _whatif_step0_saved(res, "no_straggler") == pytest.approx(late / 1e6, abs=1e-3)
    # the init is no transfer compute could hide
    assert _whatif_step0_saved(res, "full_overlap") < 1.0
    text = CliRunner().invoke(main, ["summarize", str(path), "--no-cache"]).output
    assert "rank 1 arrived late 1 time(s), 300.000 ms" in text, text
    assert not violations(document(res))


def test_an_init_that_differs_between_ranks_names_nobody(tmp_path):
    """The control: both ranks come to the first all_reduce together, rank 0's own part of
    NCCL's init takes 300 ms longer (its kernel starts 300 ms after rank 1's). The init is setup:
    nobody is late, nobody waited, the what-if has nothing to save."""
    path = tmp_path / "job.sqlite"
    sj.write_job(path, 2, STEPS, init_extra_ns={0: 300 * sj.MS})
    res = load([path], cache=False)
    assert len(res.setup) == 1 and res.setup.iloc[0]["how"] == "nccl_init"
    assert res.late.empty
    assert res.ranks["wait_ms"].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert not res.steps.set_index("step").loc[0, "late_ms"] > 0  # NaN: nobody late
    assert _whatif_step0_saved(res, "no_straggler") == pytest.approx(0.0, abs=1e-3)
    assert not violations(document(res))
