"""Per-node reports from separate nsys sessions: clocks aligned by session start, then refined
by collective end times (a collective ends at nearly the same moment on all its ranks)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

import nsyscomm
from tests.conftest import SAMPLES

PAIR = SAMPLES / "synthetic_nowrapper_2node"
SESSION_SHIFT = 5_000_000_000  # node1's session claims to start 5 s later ...
CLOCK_ERROR = 1_234_567  # ... and its clock is off by 1.23 ms that the session start does not show


def _skewed_copy(tmp_path):
    dst = tmp_path / "job"
    shutil.copytree(PAIR, dst)
    con = sqlite3.connect(dst / "node1.sqlite")
    d = -SESSION_SHIFT + CLOCK_ERROR
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        con.execute(f'UPDATE {table} SET start = start + ?, "end" = "end" + ?', (d, d))
    con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (SESSION_SHIFT,))
    con.commit()
    con.close()
    return dst


def test_offset_between_nodes_is_removed(tmp_path):
    ref = nsyscomm.load(PAIR)
    got = nsyscomm.load(_skewed_copy(tmp_path))
    assert any("aligned by session start and collective end times" in w for w in got.warnings)
    assert got.skew["straggler_rank"] == ref.skew["straggler_rank"]
    ref_per = {p["rank"]: p for p in ref.skew["per_rank"]}
    for p in got.skew["per_rank"]:
        assert p["late_count"] == ref_per[p["rank"]]["late_count"]
        # what is left is the end-time jitter between ranks, microseconds, not the 1.23 ms error
        assert p["avg_arrival_delay_ms"] == pytest.approx(ref_per[p["rank"]]["avg_arrival_delay_ms"], abs=0.01)
    # durations never change with alignment, nor does exposed communication (each report's calls
    # and compute kernels move together; made on a thread of its own from the realigned calls)
    assert got.ranks["comm_ms"].tolist() == pytest.approx(ref.ranks["comm_ms"].tolist(), rel=1e-12)
    assert got.overlap_parts is not None
    assert got.overlap["exposed_ns"].sum() > 0
    assert got.overlap.equals(ref.overlap)


def test_without_refinement_the_error_would_show(tmp_path):
    """The planted error is large enough to matter: alignment by session start alone gets it wrong."""
    from nsyscomm import api
    from nsyscomm.combine import clocks

    job = _skewed_copy(tmp_path)
    extracts = [api.extract_one(p, p.name) for p in sorted(job.glob("*.sqlite"))]
    ref = nsyscomm.load(PAIR)
    orig = clocks.refine
    try:
        clocks.refine = lambda con, ref_report, create_collectives: []
        naive = api.combine(extracts)
    finally:
        clocks.refine = orig
    naive_delay = {p["rank"]: p["avg_arrival_delay_ms"] for p in naive.skew["per_rank"]}
    ref_delay = {p["rank"]: p["avg_arrival_delay_ms"] for p in ref.skew["per_rank"]}
    assert max(abs(naive_delay[r] - ref_delay[r]) for r in ref_delay) > 0.5
