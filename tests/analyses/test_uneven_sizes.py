"""A collective whose ranks send different sizes (an all_to_all with uneven split sizes, as MoE
token routing sends) is one logical collective: one key, the same in every table. Generated
3-rank job (tests/support/job_shapes.py): rank r sends SIZES[r] bytes in each iteration's
all_to_all, and rank 2 arrives LATE_NS late to it."""

from __future__ import annotations

import pytest

from nsyscomm import api
from nsyscomm.analyses import contract
from tests.support import job_shapes

SIZES = (192, 384, 576)
ITERATIONS = 6
LATE_NS = 3_000_000


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    d = tmp_path_factory.mktemp("uneven")
    job_shapes.loop(d, nodes=1, per_node=3, iterations=ITERATIONS, late_rank=2, late_ns=LATE_NS, all_to_all_bytes=SIZES)
    return contract.document(api.load([d], cache=False))


def test_an_uneven_all_to_all_is_one_summary_row_of_all_its_ranks(doc):
    rows = [r for r in doc["summary"] if r["op"] == "all_to_all"]
    assert len(rows) == 1, rows
    row = rows[0]
    # the logical collective's size is the least its ranks send; every rank's calls are counted
    assert (row["bytes"], row["count"], row["calls"], row["ranks"]) == (min(SIZES), ITERATIONS, 3 * ITERATIONS, 3)
    assert row["dtype"] == "float32"
    # each rank's own bytes stay in the per-rank table
    sent = {r["rank"]: r["bytes"] for r in doc["rank_ops"] if r["op"] == "all_to_all"}
    assert sent == {r: ITERATIONS * b for r, b in enumerate(SIZES)}


def test_the_what_if_names_it_by_the_summary_key_and_saves_its_lateness_once(doc):
    scenario = next(w for w in doc["diagnosis"]["what_if"] if w["scenario"] == "no_straggler")
    keys = [k for k in scenario["top_keys"] if k["key"].startswith("all_to_all")]
    assert [k["key"] for k in keys] == [f"all_to_all {min(SIZES)} train.py:29 train_step"]
    # rank 2's lateness in each iteration after the first (the first is the ranks' first meeting,
    # start-up), saved once at that key, not once per rank's size
    assert keys[0]["saved_ms"] == pytest.approx((ITERATIONS - 1) * LATE_NS / 1e6, abs=0.1)
    assert sum(k["saved_ms"] for k in scenario["top_keys"]) <= scenario["total_saved_ms"] + 0.1
