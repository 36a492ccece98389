"""Set-aside rules that must never hide a real straggler, and the rules naming one: generated CPU
jobs whose timelines are known by construction (tests/whatif_jobs.py)."""

from __future__ import annotations

import pytest

from nsyscomm.api import load

from . import whatif_jobs as wj


def test_tie_on_arrival_names_the_smallest_rank(tmp_path):
    """Ranks 1 and 2 arrive at the same instant, 5 ms after rank 0, at every collective after the
    first: the smallest of the tied ranks is named late, every time."""
    late = [("compute", 0, 1.0), ("compute", 1, 6.0), ("compute", 2, 6.0)]
    steps = [[("compute", r, 1.0) for r in range(3)] + [("coll", (0, 1, 2), 1.0, 0)]]
    steps += [[*late, ("coll", (0, 1, 2), 1.0, 0)]] * 3
    path = tmp_path / "tie.sqlite"
    wj.write_job(path, 3, steps)
    res = load([path], cache=False)
    lc = res.con.execute(
        "SELECT last_rank, (last_arrival - first_arrival) / 1e6 FROM logical_collectives ORDER BY first_arrival"
    ).fetchall()
    assert [r for r, _ in lc[1:]] == [1, 1, 1]
    assert [ms for _, ms in lc[1:]] == pytest.approx([5.0] * 3, abs=1e-9)
    assert sorted(res.late["rank"].unique()) == [1]
