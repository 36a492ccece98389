"""The suite's own helpers: a check that accepts too much makes every test using it pass."""

from __future__ import annotations

from tests.conftest import TEARDOWN, done_ranks, job_did_its_work


def test_a_failed_job_needs_every_rank_s_own_record_of_its_end(tmp_path):
    note = [f"nsyscomm: 2 of 2 rank(s) ... {TEARDOWN}, and the report is complete"]
    (tmp_path / "done.0").touch()
    assert done_ranks(tmp_path) == 1
    # nsyscomm's teardown note alone is not enough: rank 1 never recorded the end of its work
    assert not job_did_its_work(1, note, done_ranks(tmp_path), 2)
    assert not job_did_its_work(0, [], done_ranks(tmp_path), 2)
    (tmp_path / "done.1").touch()
    assert job_did_its_work(1, note, done_ranks(tmp_path), 2)
    assert job_did_its_work(0, [], done_ranks(tmp_path), 2)
    assert not job_did_its_work(1, ["the job failed"], done_ranks(tmp_path), 2)
