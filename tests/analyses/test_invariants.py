"""The invariants every summary keeps (nsyscomm/analyses/invariants.py): each one, broken on
purpose in a document, is named; the bundled samples keep them all (the golden and real-data
tests run the same check on every other input)."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from nsyscomm.analyses.invariants import InvariantError, check, violations
from nsyscomm.cli import main
from tests.conftest import SAMPLES

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
    assert check(GOOD) is GOOD


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
    with pytest.raises(InvariantError):
        check(_broken(path, value))


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


@pytest.mark.parametrize("n, more", [(5, ""), (6, "; and 1 more"), (7, "; and 2 more")])
def test_the_error_shows_five_and_counts_the_rest(n, more):
    doc = copy.deepcopy(GOOD)
    doc["summary"] = [{"op": "all_reduce", "max_ms": 5.0, "busbw_GBps": -float(i)} for i in range(1, n + 1)]
    shown = "; ".join(f"$.summary[{i}].busbw_GBps is {-float(i + 1)} (negative)" for i in range(5))
    with pytest.raises(InvariantError) as e:
        check(doc)
    assert str(e.value) == (
        f"the summary breaks its invariants (a defect of nsyscomm, please report it): {shown}{more}"
    )
