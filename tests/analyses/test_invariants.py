"""The invariants every summary keeps (nsyscomm/analyses/invariants.py): each one, broken on
purpose in a document, is named; the bundled samples keep them all (the golden and real-data
tests run the same check on every other input)."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from click.testing import CliRunner

from nsyscomm.analyses import invariants
from nsyscomm.analyses.invariants import enforce, violations
from nsyscomm.cli import main
from tests.conftest import SAMPLES, real_file

GOOD = {
    "capture_ms": 100.0,
    "summary": [{"op": "all_reduce", "max_ms": 5.0, "busbw_GBps": 3.0}],
    "ranks": [{"rank": 0, "comm_ms": 40.0, "wait_ms": 10.0, "elapsed_ms": 90.0, "comm_pct": 44.4}],
    "steps": [{"step": 0, "comm_ms": 40.0, "max_rank_comm_ms": 40.0}],
    "top_skew": [{"skew_ms": 2.0}],
    "diagnosis": {
        "what_if": [
            {"step_ms_before": 30.0, "step_ms_after": 20.0, "steps": [{"step_ms_before": 30.0, "step_ms_after": 20.0}]}
        ]
    },
}


def _broken(path: list, value) -> dict:
    doc = copy.deepcopy(GOOD)
    at = doc
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    return doc


def test_a_document_that_keeps_them_passes():
    assert violations(GOOD) == []
    doc = copy.deepcopy(GOOD)
    assert enforce(doc) == GOOD | {"withheld": []}


@pytest.mark.parametrize(
    "path, value, words",
    [
        (["summary", 0, "busbw_GBps"], -1.0, "negative"),
        (["ranks", 0, "wait_ms"], 41.0, "longer than its communication"),
        (["ranks", 0, "comm_ms"], 95.0, "longer than it ran"),
        (["ranks", 0, "comm_pct"], 100.5, "over 100"),
        (["summary", 0, "max_ms"], 101.0, "longer than the capture"),
        (["top_skew", 0, "skew_ms"], 150.0, "longer than the capture"),
        (["steps", 0, "max_rank_comm_ms"], 120.0, "longer than the capture"),
        (["diagnosis", "what_if", 0, "step_ms_after"], 31.0, "made longer"),
        (["diagnosis", "what_if", 0, "steps", 0, "step_ms_after"], 30.5, "made longer"),
        (["diagnosis", "what_if", 0, "step_ms_before"], 250.0, "longer than the capture"),
    ],
)
def test_each_broken_invariant_is_named(path, value, words):
    found = violations(_broken(path, value))
    assert any(words in v for v in found), found
    # the section is withheld with the reason, the rest of the document stands
    doc = enforce(_broken(path, value))
    section = path[0] if path[0] != "diagnosis" else f"diagnosis.{path[1]}"
    assert [w["section"] for w in doc["withheld"]] == [section]
    assert words in doc["withheld"][0]["reason"]
    assert violations(doc) == []
    kept = {k for k in GOOD if k != path[0]}
    assert all(doc[k] == GOOD[k] for k in kept)


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir() if p.suffix == ".sqlite"))
def test_the_samples_keep_them(name):
    res = CliRunner().invoke(main, ["summarize", str(SAMPLES / name), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["capture_ms"] > 0
    assert violations(doc) == []


def test_every_bound_is_inclusive():
    """A rank that waits for all of its communication, communicates for all of its run, a figure
    as long as the capture and a what-if that saves nothing keep the invariants."""
    doc = copy.deepcopy(GOOD)
    doc["ranks"] = [{"rank": 0, "comm_ms": 90.0, "wait_ms": 90.0, "elapsed_ms": 90.0, "comm_pct": 100.0}]
    doc["summary"][0]["max_ms"] = 100.0
    doc["diagnosis"]["what_if"] = [
        {"step_ms_before": 100.0, "step_ms_after": 100.0, "steps": [{"step_ms_before": 5.0, "step_ms_after": 5.0}]}
    ]
    assert violations(doc) == []


def test_the_capture_is_the_documents_own_else_the_longest_rank():
    """capture_ms 100 ms, the rank ran 90 ms: a 95 ms call is within the capture. Without
    capture_ms the longest rank (90 ms) bounds it: the same call is 5 ms too long."""
    doc = _broken(["summary", 0, "max_ms"], 95.0)
    assert violations(doc) == []
    del doc["capture_ms"]
    assert violations(doc) == ["$.summary[0].max_ms is 95.0 ms, longer than the capture (90.0 ms)"]


def test_each_broken_invariant_is_named_where_it_is():
    doc = copy.deepcopy(GOOD)
    doc["summary"][0] |= {"busbw_GBps": -1.0, "max_ms": 101.0}
    doc["ranks"][0] |= {"wait_ms": 96.0, "comm_ms": 95.0, "comm_pct": 100.5}
    doc["top_skew"][0]["skew_ms"] = 150.0
    doc["steps"][0]["max_rank_comm_ms"] = 120.0
    doc["diagnosis"]["what_if"][0] |= {"step_ms_before": 250.0}
    doc["diagnosis"]["what_if"][0]["steps"].append({"step_ms_before": 30.0, "step_ms_after": 30.5})
    assert sorted(violations(doc)) == sorted(
        [
            "$.summary[0].busbw_GBps is -1.0 (negative)",
            "$.ranks[0]: waits 96.0 ms, longer than its communication (95.0 ms)",
            "$.ranks[0]: communicates 95.0 ms, longer than it ran (90.0 ms)",
            "$.ranks[0].comm_pct is 100.5, over 100",
            "$.summary[0].max_ms is 101.0 ms, longer than the capture (100.0 ms)",
            "$.top_skew[0].skew_ms is 150.0 ms, longer than the capture (100.0 ms)",
            "$.steps[0].max_rank_comm_ms is 120.0 ms, longer than the capture (100.0 ms)",
            "$.diagnosis.what_if[0]: a step of 250.0 ms, longer than the capture (100.0 ms)",
            "$.diagnosis.what_if[0].steps[1]: a step of 30.0 ms made longer (30.5 ms)",
        ]
    )


@pytest.mark.parametrize("n, more", [(3, ""), (4, "; and 1 more"), (5, "; and 2 more")])
def test_the_reason_shows_three_and_counts_the_rest(n, more):
    doc = copy.deepcopy(GOOD)
    doc["summary"] = [{"op": "all_reduce", "max_ms": 5.0, "busbw_GBps": -float(i)} for i in range(1, n + 1)]
    shown = "; ".join(f"$.summary[{i}].busbw_GBps is {-float(i + 1)} (negative)" for i in range(3))
    out = enforce(doc)
    assert out["summary"] == [] and out["ranks"] == GOOD["ranks"]
    assert out["withheld"] == [
        {"section": "summary", "reason": f"its figures break the summary's invariants: {shown}{more}"}
    ]


# --- the Result's analyses: each bound, a case just inside kept and one just outside withheld ---

RANKS = pd.DataFrame({"rank": [0, 1], "comm_ms": [50.0, 60.0], "wait_ms": [10.0, 20.0], "elapsed_ms": [100.0, 100.0]})


@pytest.mark.parametrize("total, withheld", [(100.0, False), (100.002, True)])
def test_a_rank_late_longer_than_it_ran_is_withheld(total, withheld):
    late = pd.DataFrame({"rank": [1, 1], "delay_ms": [total / 2, total / 2]})
    why = invariants.late_reason(late, RANKS)
    assert (why is not None) == withheld
    if withheld:
        assert "rank 1 would be late 100.002 ms in all, longer than it ran (100.000 ms)" in why


def test_a_negative_delay_is_withheld():
    assert "negative" in invariants.late_reason(pd.DataFrame({"rank": [0], "delay_ms": [-0.5]}), RANKS)


@pytest.mark.parametrize("late_ms, withheld", [(10.0, False), (10.002, True), (-0.1, True)])
def test_a_step_late_longer_than_its_span_is_withheld(late_ms, withheld):
    steps = pd.DataFrame({"step": [3], "late_rank": [1], "late_ms": [late_ms]})
    spans = pd.DataFrame({"step": [3], "first_ns": [5_000_000], "last_ns": [15_000_000]})
    assert (invariants.steps_late_reason(steps, spans) is not None) == withheld


@pytest.mark.parametrize("comm, withheld", [(200.0, False), (200.002, True)])
def test_a_group_communicating_longer_than_its_ranks_ran_is_withheld(comm, withheld):
    dims = pd.DataFrame({"group": ["0"], "ranks": ["0,1"], "comm_ms": [comm], "wait_ms": [1.0], "exposed_ms": [None]})
    why = invariants.dimensions_reason(dims, RANKS)
    assert (why is not None) == withheld
    if withheld:
        assert "longer than its ranks ran together (200.000 ms)" in why


@pytest.mark.parametrize("comm, withheld", [(100.0, False), (100.002, True)])
def test_a_dimension_communicating_longer_than_its_ranks_ran_is_withheld(comm, withheld):
    """Two dp groups holding the same rank (0): together they communicate no longer than it ran."""
    dims = pd.DataFrame(
        {
            "group": ["1", "2"],
            "dimension": ["dp", "dp"],
            "ranks": ["0", "0"],
            "comm_ms": [comm / 2, comm / 2],
            "wait_ms": [0.0, 0.0],
            "exposed_ms": [None, None],
        }
    )
    why = invariants.dimensions_reason(dims, RANKS)
    assert (why is not None) == withheld
    if withheld:
        assert "dimension dp would communicate 100.002 ms, longer than its ranks ran together (100.000 ms)" in why


@pytest.mark.parametrize(
    "row, withheld",
    [
        ({"comm_ms": 100.0, "wait_ms": 100.0, "elapsed_ms": 100.0}, False),
        ({"comm_ms": 100.002, "wait_ms": 1.0, "elapsed_ms": 100.0}, True),
        ({"comm_ms": 10.0, "wait_ms": 10.002, "elapsed_ms": 100.0}, True),
        ({"comm_ms": 10.0, "wait_ms": -0.001, "elapsed_ms": 100.0}, True),
    ],
)
def test_the_per_rank_bounds(row, withheld):
    assert (invariants.ranks_reason(pd.DataFrame([{"rank": 0} | row])) is not None) == withheld


@pytest.mark.parametrize("slowdown, withheld", [(1.0, False), (0.998, True)])
def test_a_slowdown_over_ideal_below_one_is_withheld(slowdown, withheld):
    rows = [{"by": "rank", "key": 1, "slowdown": slowdown}]
    assert (invariants.attribution_reason(rows) is not None) == withheld
    model = {"blocking_slowdown": slowdown, "launch_slowdown": 1.0, "Ms": 0.0, "Mw": None, "steps": []}
    assert (invariants.straggler_model_reason(model) is not None) == withheld


def test_a_negative_share_of_the_straggler_model_is_withheld():
    model = {"blocking_slowdown": 1.2, "launch_slowdown": 1.0, "Ms": -0.0012, "Mw": 0.03, "steps": []}
    assert invariants.straggler_model_reason(model) == "Ms is -0.0012 (negative)"


def _scenario(before, after, steps=None, slowdown=None):
    return {
        "scenario": "s",
        "step_ms_before": before,
        "step_ms_after": after,
        "slowdown": slowdown if slowdown is not None else before / after,
        "steps": steps or [],
    }


@pytest.mark.parametrize(
    "rows, words",
    [
        ([_scenario(5.456, 0.001)], None),
        ([_scenario(5.456, 0.0, slowdown=2.0)], "erased"),
        ([_scenario(5.0, 5.0)], None),
        ([_scenario(5.0, 5.01, slowdown=0.998)], "below 1"),
        # two scenarios of one job from different steps: only where one names the steps left out
        ([_scenario(5.0, 4.0), _scenario(6.0, 4.0)], "different steps"),
        ([_scenario(5.0, 4.0), _scenario(6.0, 4.0, [{"step": 1, "withheld": "why"}])], None),
    ],
)
def test_the_what_if_rows(rows, words):
    why = invariants.what_if_reason(rows, None)
    assert (why is None) if words is None else (words in why)


def test_the_straggler_is_the_rank_the_diagnosis_names_first():
    doc = copy.deepcopy(GOOD) | {"skew": {"straggler_rank": 1, "per_rank": []}}
    doc["diagnosis"]["late_ranks"] = [{"rank": 2}, {"rank": 1}]
    assert violations(doc) == ["$.skew.straggler_rank is 1, the Diagnosis names rank 2 first"]
    out = enforce(doc)
    assert out["skew"]["straggler_rank"] is None and out["withheld"][0]["section"] == "skew"
    doc["skew"]["straggler_rank"] = 2
    assert violations(doc) == []


def test_a_real_pipeline_trace_keeps_every_invariant_and_exits_0():
    """The straggler study's pipeline trace: summarized with every section that cannot keep its
    invariants withheld with its reason, never an internal error."""
    folder = real_file("straggler_analysis/trace-ST.parquet").parent
    res = CliRunner().invoke(main, ["summarize", str(folder), "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert violations(doc) == []
    assert doc["diagnosis"]["straggler_model"]["Ms"] >= 0
    assert doc["skew"]["straggler_rank"] == doc["diagnosis"]["late_ranks"][0]["rank"]
