"""A large job's collectives rows are written a slice of JOIN_CALLS calls at a time
(nsyscomm.combine.calls.create_collectives): DuckDB holds a statement's new rows uncompressed
until it commits. The slices make the same rows as one statement over every call: on a job of
several reports (calls numbered by order, their group size inferred) and on one whose calls wait
in gloo's queues."""

from __future__ import annotations

import pytest

import nsyscomm
from nsyscomm.combine import calls
from nsyscomm.discover import sample_jobs


def _rows(job, monkeypatch, slice_calls):
    monkeypatch.setattr(calls, "JOIN_CALLS", slice_calls)
    res = nsyscomm.load(job, cache=False)
    # the table is stored unsorted (sql/collectives.sql): its rows are compared in one order
    return res.con.execute("SELECT * FROM collectives ORDER BY ALL").fetchall()


@pytest.mark.parametrize("which", [3, 2], ids=["nowrapper_2node", "gloo_cpu"])
def test_slices_make_the_table_one_statement_makes(which, monkeypatch):
    job = sample_jobs()[which]
    whole = _rows(job, monkeypatch, 10**9)
    sliced = _rows(job, monkeypatch, 5)
    assert len(whole) > 3 * 5  # several slices, the last one short
    assert sliced == whole
