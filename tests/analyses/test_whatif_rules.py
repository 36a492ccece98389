"""What-if rules a mutation audit found unchecked (docs/testing.md), each against a job whose
truth is stated by hand from its events (tests/support/whatif_jobs.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nsyscomm.analyses import stragglers, whatif, whatif_check
from nsyscomm.api import load
from nsyscomm.ingest.straggler import trace as straggler_trace
from tests.support.whatif_jobs import write_job

START_UP_NOTE = (
    "no_straggler keeps the waiting at the ranks' first collective: its skew is their start-up, no straggler's delay"
)


def test_no_straggler_keeps_the_start_up_skew(tmp_path):
    """Rank 1 reaches the loop 5 ms after rank 0, then computes 1 ms more than rank 0 in steps 1
    and 2. The first all-reduce is both ranks' first call: its 5 ms skew is their start-up, which
    no_straggler keeps (docs/whatif.md); it takes off the 1 ms wait of each later step only.
    Measured (ms from T0): step 0 arrivals 1 and 6, ends 6.1; step 1 arrivals 7.1 and 8.1, ends
    8.2; step 2 arrivals 9.2 and 10.2, ends 10.3. Without the waits of steps 1 and 2 each of
    them is 1 ms shorter; step 0 stays as it was."""
    steps = [
        [("compute", 0, 1), ("compute", 1, 1), ("coll", (0, 1), 0.1, 0)],
        [("compute", 0, 1), ("compute", 1, 2), ("coll", (0, 1), 0.1, 0)],
        [("compute", 0, 1), ("compute", 1, 2), ("coll", (0, 1), 0.1, 0)],
    ]
    # the whole job from its first step (0): its first collective is the ranks' first meeting
    write_job(tmp_path / "startup.sqlite", 2, steps, start_ms={1: 5}, first_step=0)
    res = load([tmp_path / "startup.sqlite"], cache=False)
    ns = next(r for r in res.what_if if r["scenario"] == "no_straggler")
    saved = {s["step"]: s["saved_ms"] for s in ns["steps"]}
    assert saved == pytest.approx({0: 0.0, 1: 1.0, 2: 1.0}, abs=1e-6)
    assert ns["total_saved_ms"] == pytest.approx(2.0, abs=1e-6)
    assert START_UP_NOTE in res.what_if_analysis["notes"]


def test_the_first_message_of_a_job_keeps_its_wait(tmp_path):
    """A message that is the job's first synchronising call (the replay's group 0) waits for its
    send like any other. Each step: stage 0 computes 5 ms and sends (0.2 ms); stage 1 computes
    1 ms, posts its receive, computes 2 ms. Step 1: receive 1.0 -> 5.2 (send 5.0 -> 5.2), step 1 =
    5.2 - 1.0 = 4.2 ms; step 2: send 10.2 -> 10.4, receive posted at 8.2, step 2 = 10.4 - 5.2 =
    5.2 ms; step 3 likewise. no_straggler saves nothing: the wait is the send's lateness, a bubble.
    The capture starts at step 1, so no collective is the ranks' first meeting: no start-up note."""
    p = tmp_path / "first_message.sqlite"
    step = [("compute", 0, 5.0), ("compute", 1, 1.0), ("p2p", 0, 1, 0.2, 0), ("compute", 1, 2.0)]
    write_job(p, 2, [step] * 3)
    res = load([p], cache=False)
    ns = next(r for r in res.what_if if r["scenario"] == "no_straggler")
    assert [s["step_ms_before"] for s in ns["steps"]] == pytest.approx([4.2, 5.2, 5.2], abs=1e-6)
    assert [s["step_ms_after"] for s in ns["steps"]] == pytest.approx([4.2, 5.2, 5.2], abs=1e-6)
    assert not [n for n in res.what_if_analysis["notes"] if "start-up" in n]


def test_a_per_op_trace_overlaps_its_communication_and_drops_its_launch_delays(tmp_path):
    """A per-op trace (the OSDI'25 artifact's format) of one worker, two steps 10 s apart, each:
    forward compute 0 -> 1 s, backward compute 1.5 -> 3.5 s (0.5 s after the forward: a launch
    delay), the gradient-norm clip (a communication op) 3.5 -> 4.0 s, the optimizer 4.25 -> 4.5 s
    (0.25 s after the clip). A step is 4500 ms. full_overlap: the clip takes no time, 4000 ms.
    no_launch_delay: no gaps, 1 + 2 + 0.5 + 0.25 s = 3750 ms."""
    rows = []
    for step in (1, 2):
        at = (step - 1) * 10.0
        for seq, (optype, start, dur, mb) in enumerate(
            [
                ("forward-compute", 0.0, 1.0, 0),
                ("backward-compute", 1.5, 2.0, 0),
                ("optimizer-clip-main-grad", 3.5, 0.5, -1),
                ("optimizer", 4.25, 0.25, -1),
            ]
        ):
            rows.append(
                {
                    "dp_rank": 0,
                    "stage": 0,
                    "rank": 0,
                    "step": step,
                    "optype": optype,
                    "start_ts": at + start,
                    "duration": dur,
                    "seq_id": seq,
                    "mc": 0,
                    "mb_id": mb,
                    "gmc": 0,
                }
            )
    pd.DataFrame(rows).to_parquet(tmp_path / "trace-T.parquet")
    (tmp_path / "meta-T.yaml").write_text("dp_size: 1\npp_size: 1\nworld_size: 1\n")
    out = whatif.analyse(whatif.from_trace(stragglers.prepare(*straggler_trace.read(tmp_path / "trace-T.parquet"))))
    after = {r["scenario"]: [s["step_ms_after"] for s in r["steps"]] for r in out["what_if"]}
    before = {r["scenario"]: [s["step_ms_before"] for s in r["steps"]] for r in out["what_if"]}
    assert before["full_overlap"] == before["no_launch_delay"] == pytest.approx([4500.0, 4500.0], abs=1e-6)
    assert after["full_overlap"] == pytest.approx([4000.0, 4000.0], abs=1e-6)
    assert after["no_launch_delay"] == pytest.approx([3750.0, 3750.0], abs=1e-6)


def _calls(calls: list[tuple]) -> pd.DataFrame:
    """The what-if's input rows (sql/replay_ops.sql) of calls given as (ranks, step, op, start ms,
    end ms, exposed ms or None); each call is one collective of its ranks."""
    ms = 1_000_000
    rows = []
    for sync, (ranks, step, op, start, end, exposed) in enumerate(calls):
        for rank in ranks:
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "op": op,
                    "bytes": 4_000_000,
                    "caller": "c",
                    "group_size": len(ranks),
                    "sync_id": sync,
                    "start_ns": int(start * ms),
                    "end_ns": int(end * ms),
                    "exposed_ns": float("nan") if exposed is None else exposed * ms,
                }
            )
    return pd.DataFrame(rows)


def _after(out: dict, scenario: str) -> list:
    row = next(r for r in out["what_if"] if r["scenario"] == scenario)
    return [s.get("step_ms_after", s.get("withheld")) for s in row["steps"]]


def test_full_overlap_keeps_a_call_without_kernel_timing():
    """2 ranks, 2 steps of one all-reduce: 1.0 -> 1.5 ms (0.3 ms of it exposed) and 2.5 -> 3.0 ms
    (no kernel timing: its exposed part unknown, so nothing of it is taken off). Before: 0.5 and
    1.5 ms. full_overlap: step 1's transfer 0.5 - 0.3 = 0.2 ms; step 2 keeps its 1.0 ms gap and
    its 0.5 ms transfer: 1.5 ms."""
    calls = [((0, 1), 1, "all_reduce", 1.0, 1.5, 0.3), ((0, 1), 2, "all_reduce", 2.5, 3.0, None)]
    out = whatif.analyse(whatif.from_ops(_calls(calls)))
    assert _after(out, "full_overlap") == pytest.approx([0.2, 1.5], abs=1e-9)


def test_reference_busbw_changes_only_collectives_it_has_a_curve_for():
    """Reference: all-reduce at 40 GB/s busbw (no curve for broadcast). 2 ranks: step 1 an
    all-reduce 1.0 -> 1.5 ms, step 2 a broadcast 2.5 -> 3.0 ms, step 3 a one-rank all-reduce on
    rank 0 4.0 -> 4.5 ms (it synchronises nobody). Before: 0.5, 1.5, 1.5 ms. The 2-rank all-reduce
    moves 4 MB x 2(n-1)/n = 4 MB: 4 MB / 40 GB/s = 0.1 ms, so step 1 takes 0.1 ms; the broadcast
    and the one-rank call keep their measured 0.5 ms after their 1.0 ms gaps: 1.5 and 1.5 ms."""
    calls = [
        ((0, 1), 1, "all_reduce", 1.0, 1.5, None),
        ((0, 1), 2, "broadcast", 2.5, 3.0, None),
        ((0,), 3, "all_reduce", 4.0, 4.5, None),
    ]
    curve = pd.DataFrame(
        {"op": ["all_reduce", "all_reduce"], "bytes": [1_000_000, 16_000_000], "busbw_GBps": [40.0, 40.0]}
    )
    out = whatif.analyse(whatif.from_ops(_calls(calls)), reference=curve)
    assert _after(out, "reference_busbw") == pytest.approx([0.1, 1.5, 1.5], abs=1e-9)


class _Steps:
    """What whatif_check reads of a model: its steps, their measured times, the capture's span."""

    def __init__(self, measured, capture_ms=None):
        self.steps = list(range(len(measured or [0])))
        self.measured = None if measured is None else np.array(measured, dtype=float)
        self.capture_ms = capture_ms


def test_a_step_is_reproduced_within_the_larger_of_1_percent_and_10_us():
    """The stated tolerance, |replayed - measured| <= max(1% of measured, 0.01 ms), bound included:
    0.5 -> 0.509 ms (0.009 <= 0.01) yes; 0.5 -> 0.515 (0.015 > 0.01) no; 100 -> 100.99 (0.99 <=
    1.0) yes; 100 -> 101.02 (1.02 > 1.0) no; 0 -> 0.01 (on the bound) yes; a step without a finite
    replayed or measured time is never reproduced."""
    nan = float("nan")
    measured = [0.5, 0.5, 100.0, 100.0, 0.0, nan, 1.0]
    replayed = np.array([0.509, 0.515, 100.99, 101.02, 0.01, 1.0, nan])
    ok, doc = whatif_check.reproduction(_Steps(measured), replayed)
    assert ok.tolist() == [True, False, True, False, True, False, False]
    assert (doc["reproduced"], doc["of"]) == (3, 7)
    assert [s["reproduced"] for s in doc["steps"]] == ok.tolist()
    assert doc["steps"][2] == {"step": 2, "measured_ms": 100.0, "replayed_ms": 100.99, "reproduced": True}
    tolerance = {
        "relative": 0.01,
        "absolute_ms": 0.01,
        "rule": "|replayed - measured| <= max(relative x measured, absolute_ms)",
    }
    assert doc["tolerance"] == tolerance
    ok, doc = whatif_check.reproduction(_Steps(None), np.array([1.0]))
    assert ok.tolist() == [True] and doc["note"] == "no measured step times in this input"
    assert doc["tolerance"] == tolerance
    assert (doc["steps"], doc["reproduced"], doc["of"]) == ([], 1, 1)


@pytest.mark.parametrize(
    "before, after, capture, floor, why",
    [
        (1.0, 0.0, None, 0.0, "no time at all"),  # a step the scenario would erase
        (1.0, 2e-6, None, 0.0, None),  # just above float noise (EPS_MS): a time the step keeps
        (1.0, 1e-6, None, 0.0, "no time at all"),
        (0.0, 0.0, None, 0.0, None),  # an empty step
        (1.0, 1.0, 1.0, 0.0, None),  # no saving, the whole capture long
        (1.0, 0.5, None, 0.0, None),  # no capture known
        (float("nan"), 1.0, None, 0.0, "no finite time"),
        (1.0, float("nan"), None, 0.0, "no finite time"),
        (1.0, -0.5, None, 0.0, "negative time"),
        (-0.5, -1.0, None, 0.0, "negative time"),
        (1.0, 1.5, None, 0.0, "longer than measured"),
        (6.0, 5.0, 5.0, 0.0, "more time than the whole capture"),
        # the busiest rank's own work: 4 ms, and the 1% tolerance of a replayed figure below it
        (10.0, 4.0, None, 4.0, None),
        (10.0, 3.961, None, 4.0, None),
        (10.0, 3.959, None, 4.0, "less than its busiest rank's own work"),
        # a measured step shorter than its own work is bounded by what was measured
        (3.0, 3.0, None, 4.0, None),
        (3.0, 2.9, None, 4.0, "less than its busiest rank's own work"),
    ],
)
def test_what_a_step_may_claim(before, after, capture, floor, why):
    """0 < after <= before <= the capture's length, and after >= the step's own work (at most
    before), each bound included."""
    got = whatif_check.violation(before, after, capture, floor)
    assert (got is None) if why is None else (why in (got or ""))


def test_a_printed_row_that_breaks_an_invariant_raises():
    ok = {
        "scenario": "s",
        "saved_ms": 0.0,
        "total_saved_ms": 0.0,
        "step_ms_before": 1.0,
        "step_ms_after": 1.0,
        "slowdown": 1.0,
    }
    whatif_check.assert_row(ok | {"steps": [{"step": 1, "withheld": "why"}]}, 2.0)
    for bad in (
        {"slowdown": 0.998},
        {"slowdown": None},
        {"saved_ms": -0.5},
        {"total_saved_ms": -0.5},
        {"step_ms_after": 1.5},
        {"steps": [{"step": 1, "step_ms_before": 1.0, "step_ms_after": 1.5}]},
    ):
        with pytest.raises(AssertionError, match="what-if s"):
            whatif_check.assert_row({"steps": []} | ok | bad, 2.0)


def test_a_steps_own_work_is_the_least_time_before_each_call(tmp_path):
    """Two ranks, four steps of: rank 0 computes 5 ms, rank 1 8 ms, an all_reduce of 1 ms. A
    step's own work is 5 ms (the least time any rank spent before its call: rank 1's 3 ms more
    is the waiting no_straggler removes), none in the first step (its time starts at its first
    call); no_straggler leaves each later step 6 ms (its own work and the transfer), kept."""
    p = tmp_path / "work.sqlite"
    step = [("compute", 0, 5.0), ("compute", 1, 8.0), ("coll", (0, 1), 1.0, 0)]
    write_job(p, 2, [step] * 4)
    m = whatif.from_ops(load([str(p)])._query("replay_ops"))
    sc = whatif.scenarios(m)["no_straggler"]
    np.testing.assert_allclose(whatif_check.own_work(m, sc[0], sc[1]), [0.0, 5.0, 5.0, 5.0], atol=1e-6)
    after = m.run(*sc)
    np.testing.assert_allclose(after[1:], [6.0, 6.0, 6.0], atol=1e-6)
    keep, reasons = whatif_check.per_step(m, m.run(), after, np.ones(4, bool), whatif_check.own_work(m, *sc[:2]))
    assert keep.all() and reasons == [None] * 4
    # a scenario that would leave a later step less than that is withheld there, with its reason
    short = after - np.array([0.0, 1.5, 1.5, 1.5])
    keep, reasons = whatif_check.per_step(m, m.run(), short, np.ones(4, bool), whatif_check.own_work(m, *sc[:2]))
    assert keep.tolist() == [True, False, False, False]
    assert "less than its busiest rank's own work between calls (5.000 ms)" in reasons[1]


def _row(name, before, after, steps=()):
    return {
        "scenario": name,
        "saved_ms": before - after,
        "step_ms_before": before,
        "step_ms_after": after,
        "slowdown": before / after if after > 0 else None,
        "steps": list(steps),
        "top_keys": [],
        "warmup_steps": [],
    }


def test_the_headline_is_a_row_of_the_table_and_each_row_says_what_it_leaves_out():
    from nsyscomm.views import whatif_out

    erased = _row("no_straggler", 5.456, 0.0)  # no slowdown to print: not in the table
    kept = _row("ideal", 5.0, 4.0, [{"step": 1, "step_ms_before": 5.0, "step_ms_after": 4.0, "saved_ms": 1.0}])
    short = _row(
        "full_overlap",
        6.0,
        5.5,
        [{"step": 1, "withheld": "the reason"}, {"step": 2, "step_ms_before": 6.0, "step_ms_after": 5.5}],
    )
    rows = [erased, kept, short]
    assert whatif_out.table_rows(rows) == [kept, short]
    assert whatif_out.best_line(rows) == "best what-if: ideal saves 1.000 ms per step (5.000 -> 4.000 ms)"
    counted = {1, 2}
    assert whatif_out.left_out_lines(kept, counted) == []
    assert whatif_out.left_out_lines(short, counted) == [
        "  full_overlap leaves out step(s) 1 of its figures: the reason"
    ]
