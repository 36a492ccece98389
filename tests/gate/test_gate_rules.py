"""Each rule of docs/gate.md ("Thresholds", "Noise bands", "One baseline run") on numbers chosen so
the verdict is plain by hand, with values exactly on each threshold: a metric regresses only when
it moved in its worse direction by *more than* `rel` percent and *more than* `abs`, outside the
baseline runs' band (a value a baseline run produced is never a regression), and against one
noisy baseline run only beyond the single-run margin. Numbers are powers of two or small
integers so that every percentage is exact in floating point."""

from __future__ import annotations

import math

import pytest

from nsyscomm import gate as g
from nsyscomm.gate.single_run import SingleRun
from nsyscomm.gate.verdict import compare_values
from tests.gate.test_gate import doc, row

BUSBW = g.METRIC_BY_ID["key.busbw_GBps"]  # higher is better
AVG = g.METRIC_BY_ID["key.avg_ms"]  # lower is better
WAIT = g.METRIC_BY_ID["key.wait_ms"]  # lower is better, made of the scheduler's delays
MIN = g.METRIC_BY_ID["key.min_ms"]  # lower is better: the fastest call, what load inflates least


def _thr(rel: float = 10.0, abs_: float = 0.0) -> g.Threshold:
    return g.Threshold(rel, abs_)


# ------------------------------------------------------------------------------- direction


def test_bandwidth_drop_is_worse_and_latency_drop_is_better():
    """Bus bandwidth is higher-is-better: 8 -> 4 GB/s (-50%) is a regression; latency 8 -> 4 ms
    is an improvement; each the other way round likewise."""
    down = compare_values(BUSBW, _thr(), [8.0], 4.0)
    assert (down.status, down.delta, down.rel_pct) == ("regression", -4.0, -50.0)
    assert down.fails and down.band is None  # one run: no band
    up = compare_values(BUSBW, _thr(), [4.0], 8.0)
    assert (up.status, up.rel_pct) == ("improvement", 100.0) and not up.fails
    assert compare_values(AVG, _thr(), [8.0], 4.0).status == "improvement"
    assert compare_values(AVG, _thr(), [4.0], 8.0).status == "regression"


def test_bandwidth_drop_below_the_band_is_a_regression_and_inside_it_noise():
    """Several runs: bandwidth below the lowest baseline run fails; above the highest is no
    regression whatever the median says."""
    below = compare_values(BUSBW, _thr(), [6.0, 8.0, 10.0], 4.0)  # -50% of the median 8, under 6
    assert below.status == "regression" and below.band == (6.0, 10.0)
    inside = compare_values(BUSBW, _thr(), [4.0, 8.0, 10.0], 5.0)  # -37.5%, inside [4, 10]
    assert inside.status == "noise"


def test_margin_names_the_worse_direction():
    """The margin is what the change had to exceed: a fall for bandwidth, a rise for latency."""
    assert compare_values(BUSBW, _thr(10.0, 1.0), [8.0], 4.0).margin == "-10% and 1 GB/s"
    assert compare_values(AVG, _thr(10.0, 0.01), [4.0], 8.0).margin == "+10% and 0.01 ms"
    assert compare_values(BUSBW, _thr(50.0, 0.0), [8.0], 8.0).margin == "-50%"


def test_bandwidth_collapse_fails_the_gate_with_flat_latency():
    """End to end: the same latency, bandwidth at a quarter: the key regresses on bandwidth only,
    and the headline names bandwidth, not the latencies that did not move."""
    base = g.run_from_doc(doc([row(avg=0.5, busbw=64.0)]), "b")
    cur = g.run_from_doc(doc([row(avg=0.5, busbw=16.0)]), "c")
    v = g.compare([base], cur)
    key = next(i for i in v.items if i.scope == "key")
    assert v.exit_code == 1 and key.fails and key.status == "regression"
    assert [c.metric for c in key.comparisons if c.fails] == ["key.busbw_GBps"]
    assert v.headline().endswith("all_reduce 25.0 MB n=4 (bus bandwidth -75.0%)")


def test_only_regressed_comparisons_fail_and_the_headline_names_them():
    """Latency doubled with the bandwidth given flat: avg and p50 fail, nothing else does."""
    base = g.run_from_doc(doc([row(avg=0.5, busbw=64.0)]), "b")
    cur = g.run_from_doc(doc([row(avg=1.0, busbw=64.0)]), "c")
    v = g.compare([base], cur, g.override(g.Settings(), ignore=["job"]))
    key = next(i for i in v.items if i.scope == "key")
    assert [c.metric for c in key.comparisons if c.fails] == ["key.avg_ms", "key.p50_ms"]
    assert [c.metric for c in key.comparisons if c.status == "ok"] == ["key.busbw_GBps", "key.calls", "key.count"]
    assert v.headline() == (
        "FAIL: regression in 1 key(s): all_reduce 25.0 MB n=4 (avg latency +100.0%, p50 latency +100.0%)"
    )


def test_a_regression_of_a_reported_only_or_ignored_metric_never_fails():
    """fail = false: the regression is a warning; enabled = false: the metric is skipped."""
    warn = compare_values(AVG, g.Threshold(10.0, 0.0, fail=False), [4.0], 8.0)
    assert warn.status == "warn" and not warn.fails
    off = compare_values(AVG, g.Threshold(10.0, 0.0, enabled=False), [4.0], 8.0)
    assert off.status == "skipped" and not off.fails


# ------------------------------------------------------------------- exactly on a threshold


@pytest.mark.parametrize("metric, base, cur", [(AVG, 4.0, 5.0), (BUSBW, 4.0, 3.0)])
def test_a_change_of_exactly_rel_percent_is_not_a_regression(metric, base, cur):
    """docs/gate.md: worse "by more than rel percent". 4 -> 5 ms and 4 -> 3 GB/s are exactly
    25%; with rel = 25 neither fails, with rel just under 25 both do."""
    on = compare_values(metric, _thr(25.0, 0.5), [base], cur)
    assert abs(on.rel_pct) == 25.0 and on.status == "ok"
    assert compare_values(metric, _thr(24.9, 0.5), [base], cur).status == "regression"


@pytest.mark.parametrize("metric, base, cur", [(AVG, 4.0, 5.0), (BUSBW, 4.0, 3.0)])
def test_a_change_of_exactly_abs_is_not_a_regression(metric, base, cur):
    """docs/gate.md: worse "by more than abs": a change of exactly 1 against abs = 1 passes."""
    on = compare_values(metric, _thr(10.0, 1.0), [base], cur)
    assert abs(on.delta) == 1.0 and on.status == "ok"
    assert compare_values(metric, _thr(10.0, 0.75), [base], cur).status == "regression"


def test_an_improvement_of_exactly_the_threshold_is_not_listed():
    """Moves *beyond* the threshold in the better direction are improvements; on it, ok."""
    assert compare_values(AVG, _thr(25.0, 0.5), [4.0], 3.0).status == "ok"
    assert compare_values(AVG, _thr(24.9, 0.5), [4.0], 3.0).status == "improvement"


def test_a_value_on_the_band_edge_is_noise():
    """A value a baseline run produced is never a regression: the slowest run's 6 ms (+50% on the
    median 4 ms) is noise, 6.5 ms fails; the same for bandwidth at the slowest run's 4 GB/s."""
    edge = compare_values(AVG, _thr(), [4.0, 4.0, 6.0], 6.0)
    assert edge.band == (4.0, 6.0) and edge.rel_pct == 50.0 and edge.status == "noise"
    assert compare_values(AVG, _thr(), [4.0, 4.0, 6.0], 6.5).status == "regression"
    low = compare_values(BUSBW, _thr(), [4.0, 8.0, 8.0], 4.0)
    assert low.band == (4.0, 8.0) and low.rel_pct == -50.0 and low.status == "noise"
    assert compare_values(BUSBW, _thr(), [4.0, 8.0, 8.0], 3.5).status == "regression"


def test_the_band_is_the_runs_min_and_max_unless_noise_sigma_is_given():
    """noise_sigma defaults to 0: the band is [min, max]. Runs 4, 5, 6 ms (standard deviation 1):
    6.5 ms fails; with noise_sigma = 1 the band is [3, 7] and 6.5 ms is noise."""
    plain = compare_values(AVG, _thr(), [4.0, 5.0, 6.0], 6.5)
    assert plain.band == (4.0, 6.0) and plain.status == "regression"
    wide = compare_values(AVG, _thr(), [4.0, 5.0, 6.0], 6.5, noise_sigma=1.0)
    assert wide.band == (3.0, 7.0) and wide.status == "noise"
    assert g.Settings().noise_sigma == 0.0


# ------------------------------------------------------------------------- zero reference


def test_a_zero_baseline_that_becomes_nonzero_is_an_infinite_change():
    """No wait in the baseline (0 ms), 1 ms now: an infinite relative change, so only the
    absolute floor decides; 0 -> 0 is no change at all."""
    grew = compare_values(WAIT, _thr(20.0, 0.05), [0.0], 1.0)
    assert grew.rel_pct == math.inf and grew.status == "regression"
    assert compare_values(WAIT, _thr(20.0, 2.0), [0.0], 1.0).status == "ok"  # under the floor
    still = compare_values(WAIT, _thr(0.0, 0.0), [0.0], 0.0)
    assert (still.delta, still.rel_pct, still.status) == (0.0, 0.0, "ok")
    rose = compare_values(BUSBW, _thr(10.0, 1.0), [0.0], 8.0)
    assert rose.rel_pct == math.inf and rose.status == "improvement"


# --------------------------------------------------------------------------- one baseline run

# factor 2, a share of 25% of a 100 ms run: a per-call timing of a 10-call key must be worse than
# x2 and by more than 25 ms / 10 calls = 2.5 ms per call (docs/gate.md, "One baseline run")
NOISY = SingleRun(factor=2.0, floor_ms=25.0, calls=10.0)


def test_one_noisy_baseline_run_widens_the_threshold_to_the_single_run_margin():
    """4 -> 7 ms per call (+75%, +3 ms) is under x2: it passes against one noisy run, and fails
    where the run is steady (no single-run margin given)."""
    one = compare_values(AVG, _thr(10.0, 0.01), [4.0], 7.0, single=NOISY)
    assert one.status == "ok" and one.single_run
    assert (one.threshold.rel, one.threshold.abs) == (100.0, 2.5)
    steady = compare_values(AVG, _thr(10.0, 0.01), [4.0], 7.0)
    assert steady.status == "regression" and not steady.single_run
    assert (steady.threshold.rel, steady.threshold.abs) == (10.0, 0.01)
    # beyond x2 and beyond 2.5 ms per call: fails, against the widened margin
    worse = compare_values(AVG, _thr(10.0, 0.01), [4.0], 9.0, single=NOISY)
    assert worse.status == "regression" and worse.margin == "+100% and 2.5 ms"
    # exactly x2 is not "worse than x2"
    assert compare_values(AVG, _thr(10.0, 0.01), [4.0], 8.0, single=NOISY).status == "ok"


def test_several_noisy_runs_keep_the_single_run_margin_for_timings_load_inflates():
    """Two noisy runs of 4 ms: the latencies a host's load inflates keep the single-run margin
    (x2 and 2.5 ms per call): 7 ms passes, 9 ms fails; a steady key keeps the plain threshold."""
    two = compare_values(AVG, _thr(10.0, 0.01), [4.0, 4.0], 7.0, single=NOISY)
    assert two.status == "ok" and two.single_run and (two.threshold.rel, two.threshold.abs) == (100.0, 2.5)
    assert compare_values(AVG, _thr(10.0, 0.01), [4.0, 4.0, 4.0], 9.0, single=NOISY).status == "regression"
    steady = compare_values(AVG, _thr(10.0, 0.01), [4.0, 4.0], 7.0)
    assert steady.status == "regression" and not steady.single_run


def test_noisy_several_runs_widen_the_band_by_its_own_width():
    """The fastest calls of noisy runs, 4, 4 and 8 ms: the band [4, 8] widens by its width 4 on
    either side, [0, 12]: 10 ms (x2.5) is noise, 12 ms (the edge) too, 12.5 ms fails."""
    c = compare_values(MIN, _thr(10.0, 0.01), [4.0, 4.0, 8.0], 10.0, single=NOISY)
    assert c.band == (0.0, 12.0) and c.status == "noise"
    assert compare_values(MIN, _thr(10.0, 0.01), [4.0, 4.0, 8.0], 12.0, single=NOISY).status == "noise"
    assert compare_values(MIN, _thr(10.0, 0.01), [4.0, 4.0, 8.0], 12.5, single=NOISY).status == "regression"
    two = compare_values(MIN, _thr(10.0, 0.01), [4.0, 6.0], 7.5, single=NOISY)  # two runs alike
    assert two.band == (2.0, 8.0)


def test_a_noisy_fastest_call_fails_beyond_the_factor_alone():
    """Several noisy runs whose fastest call took 4 ms (a band of no width): it fails when worse
    than x2 (single_run_factor) and no floor of run time applies; x2 exactly passes. Against
    one run, the whole single-run margin holds (x2 and 2.5 ms per call)."""
    on = compare_values(MIN, _thr(10.0, 0.01), [4.0, 4.0, 4.0], 8.0, single=NOISY)
    assert on.status == "ok" and on.single_run and (on.threshold.rel, on.threshold.abs) == (100.0, 0.01)
    assert compare_values(MIN, _thr(10.0, 0.01), [4.0, 4.0, 4.0], 8.25, single=NOISY).status == "regression"
    # 1 -> 3 ms (x3, 2 ms more per call): fails against several runs, not against one
    assert compare_values(MIN, _thr(10.0, 0.01), [1.0, 1.0], 3.0, single=NOISY).status == "regression"
    one = compare_values(MIN, _thr(10.0, 0.01), [1.0], 3.0, single=NOISY)
    assert one.status == "ok" and (one.threshold.rel, one.threshold.abs) == (100.0, 2.5)


def test_waiting_keeps_the_single_run_margin_with_several_runs():
    """Waiting is made of whole ranks descheduled: with two runs of 4 ms, 7 ms of wait (a total,
    not per call: floor 25 ms) passes on a noisy run, fails on a steady one."""
    c = compare_values(WAIT, _thr(20.0, 0.05), [4.0, 4.0], 7.0, single=NOISY)
    assert c.status == "ok" and c.single_run and (c.threshold.rel, c.threshold.abs) == (100.0, 25.0)
    assert compare_values(WAIT, _thr(20.0, 0.05), [4.0, 4.0], 7.0).status == "regression"


def test_one_host_timed_baseline_run_end_to_end():
    """A gloo run (overlap without ranks: host-timed), 100 ms long, 10 logical calls per key:
    0.5 -> 0.9 ms (+80%) passes; 0.5 -> 4 ms (x8, +35 ms over the run, beyond 25 ms) fails."""
    host = {"overlap": {"per_rank": []}}
    quiet = g.Settings(min_calls=1)
    quiet = g.override(quiet, ignore=["job", "rank"])
    base = g.run_from_doc(doc([row(avg=0.5, busbw=64.0)], **host), "b")
    v = g.compare([base], g.run_from_doc(doc([row(avg=0.9, busbw=64.0)], **host), "c"), quiet)
    key = next(i for i in v.items if i.scope == "key")
    avg = next(c for c in key.comparisons if c.metric == "key.avg_ms")
    assert v.exit_code == 0 and avg.status == "ok" and avg.single_run
    assert (avg.threshold.rel, avg.threshold.abs) == (100.0, 2.5)
    v = g.compare([base], g.run_from_doc(doc([row(avg=4.0, busbw=64.0)], **host), "c"), quiet)
    assert v.exit_code == 1


# ----------------------------------------------------------------------- the fastest call


def test_the_fastest_call_is_gated_on_its_default_threshold():
    """key.min_ms of a steady key fails when worse by more than its default rel (10%): runs of
    5 ms, 5.5 ms (exactly +10%) passes, 5.625 ms (+12.5%) fails and is the one comparison that
    does; the averages have not moved."""
    assert (g.Settings().thresholds["key.min_ms"].rel, MIN.abs) == (10.0, 0.01)
    base = [g.run_from_doc(doc([row(avg=8.0, min_ms=5.0)]), f"b{i}") for i in range(3)]
    quiet = g.override(g.Settings(), ignore=["job", "rank"])
    on = g.compare(base, g.run_from_doc(doc([row(avg=8.0, min_ms=5.5)]), "c"), quiet)
    assert on.exit_code == 0, on.headline()
    v = g.compare(base, g.run_from_doc(doc([row(avg=8.0, min_ms=5.625)]), "c"), quiet)
    key = next(i for i in v.items if i.scope == "key")
    assert v.exit_code == 1 and [c.metric for c in key.comparisons if c.fails] == ["key.min_ms"]
    assert "min latency +12.5%" in v.headline()


def test_a_host_timed_run_fails_on_its_fastest_call_beyond_x2_and_the_widened_band():
    """Host-timed runs (overlap without ranks) whose fastest calls took 0.5, 0.5 and 1 ms and
    whose mean call 4 ms: the band [0.5, 1] widens to [0, 1.5]; 1.5 ms (x3, the edge) is noise and
    1.5625 ms fails; the mean call moved by nothing."""
    host = {"overlap": {"per_rank": []}}
    base = [g.run_from_doc(doc([row(avg=4.0, min_ms=m)], **host), f"b{i}") for i, m in enumerate((0.5, 0.5, 1.0))]
    quiet = g.override(g.Settings(), ignore=["job", "rank"])

    def min_of(cur):
        v = g.compare(base, g.run_from_doc(doc([row(avg=4.0, min_ms=cur)], **host), "c"), quiet)
        return next(c for i in v.items if i.scope == "key" for c in i.comparisons if c.metric == "key.min_ms")

    edge = min_of(1.5)
    assert edge.band == (0.0, 1.5) and edge.status == "noise" and edge.single_run
    assert min_of(1.5625).status == "regression"


def test_the_op_row_of_several_callers_keeps_their_fastest_call():
    """Per-caller rows aggregated to one (op, size, n) row: its fastest call is the fastest of
    theirs, and unknown (None) when one caller's row lacks it."""
    from nsyscomm.gate.runs import _aggregate

    rows = [row(caller="a.py f", min_ms=0.75), row(caller="b.py g", min_ms=0.25), row(caller="c.py h", min_ms=0.5)]
    assert _aggregate(rows)["min_ms"] == 0.25
    assert _aggregate([*rows[:2], {k: v for k, v in rows[2].items() if k != "min_ms"}])["min_ms"] is None


def test_the_summary_holds_each_keys_fastest_logical_call(tmp_path):
    """A generated gloo job whose all_reduce transfers take 3, 1.5, 2 and 2.5 ms (each call's
    fastest rank is the last to arrive: its time is the transfer): min_ms is 1.5, the others'
    average 2.25."""
    from nsyscomm.analyses.contract import document
    from nsyscomm.api import load
    from tests.support import whatif_jobs as wj

    transfers = [3.0, 1.5, 2.0, 2.5]
    steps = [[("compute", 0, 5.0), ("compute", 1, 6.0), ("coll", (0, 1), ms, 0)] for ms in transfers]
    wj.write_job(tmp_path / "job.sqlite", 2, steps, first_step=0)
    (summary,) = document(load([tmp_path / "job.sqlite"], cache=False))["summary"]
    assert summary["count"] == 4 and summary["min_ms"] == pytest.approx(1.5, abs=1e-6)
    assert summary["avg_ms"] == pytest.approx(2.25, abs=1e-6)
