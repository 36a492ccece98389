"""What-if rules a mutation audit found unchecked (docs/testing.md), each against a job whose
truth is stated by hand from its events (tests/support/whatif_jobs.py)."""

from __future__ import annotations

import pytest

from nsyscomm.api import load
from tests.support.whatif_jobs import write_job


def test_no_straggler_keeps_the_start_up_skew(tmp_path):
    """Rank 1 reaches the loop 5 ms after rank 0, then computes 1 ms more than rank 0 in steps 1
    and 2. The first all-reduce is both ranks' first call: its 5 ms skew is their start-up, which
    no_straggler keeps (docs/whatif.md); it takes off the 1 ms wait of each later step only.
    Measured (ms from T0): step 0 arrivals 1 and 6, ends 6.1; step 1 arrivals 7.1 and 8.1, ends
    8.2; step 2 arrivals 9.2 and 10.2, ends 10.3. Without the waits of steps 1 and 2 each of
    them is 1 ms shorter; step 0 stays as it was."""
    steps = [
        [("compute", 0, 1), ("compute", 1, 1), ("coll", (0, 1), 0.1, 0)],
        [("compute", 0, 1), ("compute", 1, 2), ("coll", (0, 1), 0.1, 0)],
        [("compute", 0, 1), ("compute", 1, 2), ("coll", (0, 1), 0.1, 0)],
    ]
    # the whole job from its first step (0): its first collective is the ranks' first meeting
    write_job(tmp_path / "startup.sqlite", 2, steps, start_ms={1: 5}, first_step=0)
    res = load([tmp_path / "startup.sqlite"], cache=False)
    ns = next(r for r in res.what_if if r["scenario"] == "no_straggler")
    saved = {s["step"]: s["saved_ms"] for s in ns["steps"]}
    assert saved == pytest.approx({0: 0.0, 1: 1.0, 2: 1.0}, abs=1e-6)
    assert ns["total_saved_ms"] == pytest.approx(2.0, abs=1e-6)
