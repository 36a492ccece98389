"""Reports with absurd values give correct partial output with a warning, not an error."""

from __future__ import annotations

import shutil
import sqlite3

import nsyscomm
from tests.conftest import SAMPLES

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"


def _copy(tmp_path, name="r.sqlite"):
    dst = tmp_path / name
    shutil.copy(DDP, dst)
    return dst


def test_non_utf8_strings_are_replaced_not_fatal(tmp_path):
    dst = _copy(tmp_path)
    con = sqlite3.connect(dst)
    # a caller with a byte that is not UTF-8, in every wrapper message of rank 0's first call site
    con.execute(
        "UPDATE StringIds SET value = replace(value, 'train.py:88', CAST(X'747261696EFF2E7079' AS TEXT) "
        "|| ':88') WHERE value LIKE 'nsyscomm:%'"
    )
    con.commit()
    con.close()
    before = dst.read_bytes()
    res = nsyscomm.load(dst, cache=False)
    ref = nsyscomm.load(DDP, cache=False)
    assert res.n_calls == ref.n_calls
    assert any("not valid UTF-8" in w for w in res.warnings)
    assert any("train\ufffd.py:88" in str(c) for c in res.collectives["caller"])
    assert dst.read_bytes() == before


def test_calls_that_end_before_they_start_are_left_out(tmp_path):
    dst = _copy(tmp_path)
    con = sqlite3.connect(dst)
    n = con.execute("""UPDATE NVTX_EVENTS SET "end" = start - 5
                       WHERE rowid IN (SELECT e.rowid FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
                                       WHERE s.value LIKE 'nsyscomm:broadcast%')""").rowcount
    con.commit()
    con.close()
    res = nsyscomm.load(dst, cache=False)
    assert n == 4
    c = res.collectives
    assert (c["duration_ns"] >= 0).all()
    assert any("4 call(s) end before they start" in w for w in res.warnings)
    # the broken ranges are gone; their kernels still count, from the kernel name alone
    b = c[c["op"] == "broadcast"]
    assert len(b) == 4 and set(b["source"]) == {"kernel_name"}


def test_duplicate_ranks_are_renumbered(tmp_path):
    """The same job's report twice, read as one job on request (merge): the second copy's
    processes get new ranks, with a warning, and no rank is counted twice in the skew table."""
    a = _copy(tmp_path, "a.sqlite")
    shutil.copy(a, tmp_path / "b.sqlite")
    res = nsyscomm.load(tmp_path, cache=False, merge=True)
    ranks = res.ranks
    assert sorted(ranks["rank"]) == list(range(8))
    assert any("claimed by several processes" in w for w in res.warnings)
    skew = res.skew
    assert all(p["late_count"] <= skew["instances"] for p in skew["per_rank"])
