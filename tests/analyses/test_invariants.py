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
