"""How sql/collectives.sql runs, not only what it gives (its figures are the samples' truth and
the goldens): a window function sorts every column it carries, so the calls' numbering and
queue timing run over each call's few timing columns, and each call goes through the window of
its own queue only. Checked on DuckDB's profile of the query over the bundled samples."""

from __future__ import annotations

import json

import pytest

import nsyscomm
from nsyscomm import duck
from nsyscomm.discover import sample_jobs

# columns of the wide rows that no window of the query needs
WIDE_ONLY = {"caller", "kernel", "algo", "proto", "dtype", "group_ranks", "busy_at_start", "busy_at_end"}


def _operators(node):
    yield node
    for child in node.get("children", []):
        yield from _operators(child)


def _profile(con, tmp_path):
    out = tmp_path / "profile.json"
    con.execute("PRAGMA enable_profiling = 'json'")
    con.execute(f"PRAGMA profiling_output = '{out}'")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE collectives_again AS {duck.sql('collectives')}")
    finally:
        con.execute("PRAGMA disable_profiling")
    return [op for op in _operators(json.loads(out.read_text())) if op.get("operator_name") == "WINDOW"]


@pytest.fixture(scope="module", params=[0, 2], ids=["nccl_streams", "gloo_groups"])
def sample(request):
    return nsyscomm.load(sample_jobs()[request.param], cache=False)


def test_each_call_goes_through_the_window_of_its_own_queue_only(sample, tmp_path):
    queued = duck.scalar(
        sample.con,
        "SELECT count(*) FROM collectives WHERE gpu_start IS NOT NULL "
        "OR (source = 'wrapper' AND \"group\" IS NOT NULL AND op NOT IN ('send', 'recv'))",
    )
    windows = _profile(sample.con, tmp_path)
    assert queued and windows
    # every call of these samples has its sequence number: no numbering window runs, and each
    # call with a queue (a stream, a gloo group) runs through that queue's window once
    assert sum(int(w["operator_cardinality"]) for w in windows) == queued


def test_the_windows_carry_the_timing_columns_only(sample, tmp_path):
    for w in _profile(sample.con, tmp_path):
        carried = set()
        for op in _operators(w):
            for c in (op.get("extra_info") or {}).get("Projections", []) or []:
                carried.add(c)
        assert not carried & WIDE_ONLY, (w["extra_info"], carried & WIDE_ONLY)
