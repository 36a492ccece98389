"""Point-to-point waits and the what-if's reproduction of the job, on generated jobs whose every
time is known by construction (tests/support/whatif_jobs.py): a pipeline whose receiver waits for a slow
sender, buffered sends, asynchronous collectives timed as their enqueue, gradient accumulation,
a rank 2 s late at step 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nsyscomm.analyses import whatif
from nsyscomm.api import load
from tests.support.whatif_jobs import write_job


def _row(result, scenario):
    return next(r for r in result.what_if if r["scenario"] == scenario)


def _reproduction(result):
    return result.what_if_analysis["reproduction"]


def _invariants(result):
    """0 <= after <= before <= the capture, saved >= 0, on every figure the output holds."""
    c = result.collectives
    capture = (c["exec_end"].max() - c["exec_start"].min()) / 1e6
    for r in result.what_if:
        figures = [(r["step_ms_before"], r["step_ms_after"])]
        figures += [(s["step_ms_before"], s["step_ms_after"]) for s in r["steps"] if "withheld" not in s]
        for b, a in figures:
            assert 0 <= a <= b + 1e-9 and b <= capture + 1e-9, (r["scenario"], b, a, capture)
        assert r["saved_ms"] >= -1e-9 and r["total_saved_ms"] >= -1e-9


SLEEP_MS = 4.0  # stage 0's extra compute per step: the receiver's wait for its sender


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """2 stages. Step 0: one all-reduce (0.1 ms) where the ranks meet. Steps 1-3: stage 0 computes
    1 + SLEEP_MS ms and sends (0.2 ms); stage 1 computes 1 ms, posts its receive, computes 2 ms.
    Step 1: send 5.1 -> 5.3, receive 1.1 -> 5.3 (waits 4.0), compute to 7.3; step 1 = 5.3 - 0.1 =
    5.2. Step 2: receive posted at 8.3, send 10.3 -> 10.5 (the receive waits 2.0: stage 1's own
    work overlaps the rest), step 2 = 10.5 - 5.3 = 5.2; step 3 likewise."""
    p = tmp_path_factory.mktemp("pipe") / "pipeline.sqlite"
    step = [("compute", 0, 1 + SLEEP_MS), ("compute", 1, 1.0), ("p2p", 0, 1, 0.2, 0), ("compute", 1, 2.0)]
    write_job(p, 2, [[("coll", (0, 1), 0.1, 0)]] + [step] * 3, first_step=0)
    return load([p], cache=False)


def test_a_message_pairs_its_send_and_its_receive(pipeline):
    lc = pipeline.con.execute(
        "SELECT participants, last_rank FROM logical_collectives WHERE pair IS NOT NULL"
    ).fetchall()
    assert lc == [(2, 0)] * 3  # one logical per message, the sender named as the late one


def test_the_receiver_waits_for_its_late_sender(pipeline):
    sk = pipeline.skew_ranks.set_index("rank")
    # step 1's receive waits 4.0 ms (5.0 - 1.0), the later ones 2.0: 8.0 ms in all
    assert sk.loc[1, "wait_ms"] == pytest.approx(8.0, abs=1e-6)
    assert sk.loc[0, "wait_ms"] == pytest.approx(0.0, abs=1e-6)
    assert sk.loc[0, "late_count"] - sk.loc[1, "late_count"] == 3  # (step 0's tie names rank 0 too)
    steps = pipeline.steps.set_index("step").loc[[1, 2, 3]]
    assert steps["late_rank"].tolist() == [0, 0, 0]
    assert steps["late_ms"].tolist() == pytest.approx([4.0, 2.0, 2.0], abs=1e-6)
    top = pipeline.top_skew(1).iloc[0]
    assert top["last_rank"] == 0 and top["skew_ms"] == pytest.approx(4.0, abs=1e-6)


def test_the_bubble_is_no_straggler_delay(pipeline):
    """A receive still waits for its send: removing stragglers removes no pipeline bubble (with
    the rule gone, the receive would end 0.2 ms after it is posted and each step would save)."""
    r = _row(pipeline, "no_straggler")
    assert [s["step_ms_before"] for s in r["steps"]] == pytest.approx([0.1, 5.2, 5.2, 5.2], abs=1e-6)
    assert [s["step_ms_after"] for s in r["steps"]] == pytest.approx([0.1, 5.2, 5.2, 5.2], abs=1e-6)
    assert r["saved_ms"] == pytest.approx(0.0, abs=1e-6)
    _invariants(pipeline)


def test_the_replay_reproduces_each_step_and_says_how_close(pipeline):
    rep = _reproduction(pipeline)
    assert rep["tolerance"] == {"relative": 0.01, "absolute_ms": 0.01, "rule": rep["tolerance"]["rule"]}
    assert [s["measured_ms"] for s in rep["steps"]] == pytest.approx([0.1, 5.2, 5.2, 5.2], abs=1e-6)
    assert [s["replayed_ms"] for s in rep["steps"]] == pytest.approx([0.1, 5.2, 5.2, 5.2], abs=1e-6)
    assert rep["reproduced"] == rep["of"] == 4
    from nsyscomm.views import json_out

    doc = json.loads(json_out.dumps(pipeline))
    assert doc["diagnosis"]["whatif"]["reproduction"]["reproduced"] == 4


def test_a_buffered_send_waits_for_nobody(tmp_path):
    """The receiver is late: the send (0.2 ms) returned long before the receive was posted.
    Stage 0: send at 1.0 -> 1.2, compute 1 ms; stage 1: computes 3 ms, receives 3.0 -> 3.2. Step 1 =
    3.2 - 1.0 = 2.2; step 2: send at 2.2 -> 2.4, compute to 3.4; receive 3.2 + 3 = 6.2 -> 6.4:
    step 2 = 6.4 - 3.2 = 3.2. Made to wait for its receive, the send would move stage 0 on by 2 ms."""
    p = tmp_path / "late_recv.sqlite"
    step = [("compute", 0, 1.0), ("compute", 1, 3.0), ("p2p", 0, 1, 0.2, 0), ("compute", 0, 0.0)]
    write_job(p, 2, [step, step])
    res = load([p], cache=False)
    rep = _reproduction(res)
    assert [s["replayed_ms"] for s in rep["steps"]] == pytest.approx([2.2, 3.2], abs=1e-6)
    assert rep["reproduced"] == 2
    assert res.steps["late_ms"].isna().all()  # a late receive keeps nobody waiting
    _invariants(res)


def test_gradient_accumulation_with_asynchronous_buckets(tmp_path):
    """Steps of 2 and then 1 micro-batch; each micro-batch computes 3 ms (rank 1: 5 ms) and
    all-reduces asynchronously (0.5 ms on the backend; rank 0's call returns in 0.01 ms).
    Rank 0's clock: 3.0, async 3.0-3.01, 6.01, 6.01-6.02; rank 1: 5.0 all-reduce 5.0-5.5, 10.5,
    10.5-11.0. Step 1 = 11.0 - 3.0 = 8.0. Step 2: rank 0 at 6.02 + 3 = 9.02 -> 9.03, rank 1 at
    11.0 + 5 = 16.0 -> 16.5: step 2 = 16.5 - 11.0 = 5.5."""
    p = tmp_path / "accum.sqlite"
    micro = [("compute", 0, 3.0), ("compute", 1, 5.0), ("async", (0, 1), 0.5, 0)]
    write_job(p, 2, [micro * 2, micro])
    res = load([p], cache=False)
    rep = _reproduction(res)
    assert [s["measured_ms"] for s in rep["steps"]] == pytest.approx([8.0, 5.5], abs=1e-6)
    assert [s["replayed_ms"] for s in rep["steps"]] == pytest.approx([8.0, 5.5], abs=1e-6)
    for r in res.what_if:
        assert [s["step_ms_before"] for s in r["steps"] if "withheld" not in s] == pytest.approx(
            [8.0, 5.5][: len(r["steps"])], abs=1e-6
        )
    _invariants(res)


def test_a_lateness_at_step_0_is_not_counted_again_in_step_1(tmp_path):
    """Rank 1 reaches the loop 2 s late; steps 0-2 of (compute 10 ms, all-reduce 0.5 ms). Step 0
    (from its first call, at 10 ms on rank 0) ends at 2010.5 ms: 2000.5 ms; steps 1 and 2: 10.5 ms
    each. No what-if figure of step 1 or 2 may hold the 2 s."""
    p = tmp_path / "late0.sqlite"
    step = [("compute", 0, 10.0), ("compute", 1, 10.0), ("coll", (0, 1), 0.5, 0)]
    write_job(p, 2, [step] * 3, start_ms={1: 2000.0}, first_step=0)
    res = load([p], cache=False)
    rep = _reproduction(res)
    assert [s["measured_ms"] for s in rep["steps"]] == pytest.approx([2000.5, 10.5, 10.5], abs=1e-6)
    for r in res.what_if:
        later = [s for s in r["steps"] if s["step"] > 0 and "withheld" not in s]
        assert all(s["step_ms_before"] == pytest.approx(10.5, abs=1e-6) for s in later), r["scenario"]
        assert all(s["step_ms_after"] <= 10.5 + 1e-6 for s in later), r["scenario"]
    _invariants(res)


def test_a_scenario_that_lengthens_a_step_is_withheld(tmp_path):
    """3 ranks, 2 steps (the propagation job of test_whatif.py). Step 1: ranks 0 and 1 compute
    1 ms, all-reduce on their own group (0.1 ms), compute 0.5 ms; rank 2 computes 1.2 ms; all-reduce
    of all three (0.1 ms): measured 1.7 - 1.0 = 0.7 ms. The ideal (the time before each call at
    its collective's median, over ranks that did different work before it) ends step 1 later than
    measured: no saving to report, so that step's ideal is withheld, its figures unprinted. Step 2
    (rank 2 computes 2.5 ms) is a saving and stays."""
    p = tmp_path / "ideal_longer.sqlite"

    def step(c1, c2):
        return [
            ("compute", 0, 1),
            ("compute", 1, c1),
            ("coll", (0, 1), 0.1, 1),
            ("compute", 0, 0.5),
            ("compute", 1, 0.5),
            ("compute", 2, c2),
            ("coll", (0, 1, 2), 0.1, 0),
        ]

    write_job(p, 3, [step(1.0, 1.2), step(1.3, 2.5)])
    res = load([p], cache=False)
    ideal = {s["step"]: s for s in _row(res, "ideal")["steps"]}
    assert set(ideal[1]) == {"step", "withheld"} and "longer than measured" in ideal[1]["withheld"]
    assert ideal[2]["step_ms_before"] == pytest.approx(2.6, abs=1e-6)
    assert ideal[2]["step_ms_after"] < ideal[2]["step_ms_before"]
    assert _row(res, "ideal")["step_ms_before"] == pytest.approx(2.6, abs=1e-6)  # step 2 alone
    _invariants(res)


def test_a_step_the_replay_does_not_reproduce_is_withheld(pipeline):
    """The model is told step 2 measured 1 ms more than its replay: that step's what-if goes."""
    m = whatif.from_ops(pipeline._query("replay_ops"))
    m.measured = np.array([0.1, 5.2, 6.2, 5.2])
    out = whatif.analyse(m)
    rep = out["reproduction"]
    assert [s["reproduced"] for s in rep["steps"]] == [True, True, False, True]
    for r in out["what_if"]:
        s2 = next(s for s in r["steps"] if s["step"] == 2)
        assert set(s2) == {"step", "withheld"} and "reproduce" in s2["withheld"]
        assert r["step_ms_before"] == pytest.approx((0.1 + 5.2 + 5.2) / 3, abs=1e-6)
    m.measured = np.array([1.0, 1.0, 1.0, 1.0])
    out = whatif.analyse(m)
    assert out["what_if"] == [] and "reproduce" in out["withheld"]["all"]


def test_the_trace_draws_each_message_from_its_send_to_its_receive(pipeline):
    from nsyscomm.views import trace as tr

    doc = tr.build(pipeline, None)
    ev = [e for e in doc["traceEvents"] if e.get("cat") == "message"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == len(ends) == 3 and set(starts) == set(ends)
    for i, s in starts.items():
        f = ends[i]
        assert (s["pid"], f["pid"]) == (0, 1) and f["bp"] == "e"
        assert f["ts"] >= s["ts"]
    # from each send's start (5.1, 10.3, 15.5 ms after the first call, in us), where the receive
    # that waited for it holds the data
    assert sorted(e["ts"] for e in starts.values()) == pytest.approx([5100, 10300, 15500], abs=1e-3)
    assert sorted(e["ts"] for e in ends.values()) == pytest.approx([5100, 10300, 15500], abs=1e-3)


def test_a_step_that_ends_inside_an_earlier_one_takes_no_time(tmp_path):
    """Steps that overlap across ranks: in step 1 rank 2 computes 10 ms and makes a call alone
    (ends 10.1), ranks 0 and 1 all-reduce at 8.0 (rank 1 computes 8 ms) -> 8.1; in step 2 ranks 0
    and 1 compute 1 ms and all-reduce again -> 9.2. Step 2 ends 0.9 ms before step 1 does: steps
    end in order, so step 2 ends with step 1 and takes 0 ms (never -0.9), measured and replayed
    alike, and every figure of the document keeps its invariants."""
    from nsyscomm.analyses.contract import document
    from nsyscomm.analyses.invariants import violations

    p = tmp_path / "overlap.sqlite"
    s1 = [
        ("compute", 0, 1.0),
        ("compute", 1, 8.0),
        ("coll", (0, 1), 0.1, 0),
        ("compute", 2, 10.0),
        ("coll", (2,), 0.1, 2),
    ]
    s2 = [("compute", 0, 1.0), ("compute", 1, 1.0), ("coll", (0, 1), 0.1, 0)]
    write_job(p, 3, [s1, s2])
    res = load([p], cache=False)
    assert res.what_if
    rep = {s["step"]: s for s in _reproduction(res)["steps"]}
    assert rep[2]["measured_ms"] == pytest.approx(0.0, abs=1e-6) and rep[2]["reproduced"]
    for r in res.what_if:
        s2 = next(s for s in r["steps"] if s["step"] == 2)
        assert s2["step_ms_before"] == pytest.approx(0.0, abs=1e-6), (r["scenario"], s2)
    _invariants(res)
    assert violations(document(res)) == []
