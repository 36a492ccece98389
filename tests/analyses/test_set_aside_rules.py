"""Set-aside rules that must never hide a real straggler, and the rules naming one: generated CPU
jobs whose timelines are known by construction (tests/support/whatif_jobs.py)."""

from __future__ import annotations

import pytest

from nsyscomm.api import load
from tests.support import whatif_jobs as wj


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


CKPT_MS = 2000.0  # rank 1's checkpoint load before the first collective


def _checkpoint_job(tmp_path, **kw):
    """Two ranks start together (their rendezvous aligned them); rank 1 then loads a checkpoint
    for CKPT_MS inside its own NVTX range before the first all_reduce; 5 steps of 5 ms compute and
    a 1 ms all_reduce follow, nobody late."""
    first = [("compute", 0, 5.0), ("compute", 1, CKPT_MS, "load_checkpoint"), ("compute", 1, 5.0)]
    steps = [[*first, ("coll", (0, 1), 1.0, 0)]]
    steps += [[("compute", 0, 5.0), ("compute", 1, 5.0), ("coll", (0, 1), 1.0, 0)]] * 5
    path = tmp_path / "ckpt.sqlite"
    wj.write_job(path, 2, steps, **kw)
    return load([path], cache=False)


def test_a_slow_checkpoint_load_before_the_first_collective_is_a_straggler(tmp_path):
    res = _checkpoint_job(tmp_path, first_step=0)
    st = res.startup
    assert st["collectives"] == 0 and st["late"] == 1
    (row,) = st["rows"].to_dict("records")
    assert row["last_rank"] == 1 and row["skew_ms"] == pytest.approx(CKPT_MS, abs=1e-6)
    assert row["late_ms"] == pytest.approx(CKPT_MS, abs=1e-6) and not row["set_aside"]
    # the Diagnosis names the rank, its delay and its cause
    late = res.late
    (first,) = late[late["seq"] == 0].to_dict("records")
    assert first["rank"] == 1 and first["delay_ms"] == pytest.approx(CKPT_MS, abs=1e-6)
    assert first["cause"] == "host" and "load_checkpoint" in first["detail"], first
    # the per-step row and the what-if do not hide it
    steps = res.steps.set_index("step")
    assert int(steps.loc[0, "late_rank"]) == 1 and steps.loc[0, "late_ms"] == pytest.approx(CKPT_MS, abs=1e-6)
    ns = next(r for r in res.what_if if r["scenario"] == "no_straggler")
    assert ns["steps"][0]["saved_ms"] == pytest.approx(CKPT_MS, abs=1e-3)
    # the words say so too
    from nsyscomm.views import set_aside

    text = " ".join(set_aside.lines(res))
    assert "rank 1 is named late" in text and f"{CKPT_MS:.3f} ms is lateness" in text, text
    # and the steady arrival pattern the gate compares leaves the first meeting out
    assert res.skew["instances"] == 5
    assert all(r["wait_ms"] == pytest.approx(0.0, abs=1e-6) for r in res.skew["per_rank"])


def test_a_capture_window_has_no_start_up(tmp_path):
    """Captured from step 10 on, the ranks met before the capture: a 7.6 ms skew at the first
    collective in it is lateness, however small against what start-up may explain."""
    steps = [[("compute", 0, 5.0), ("compute", 1, 12.6), ("coll", (0, 1), 1.0, 0)]]
    steps += [[("compute", 0, 5.0), ("compute", 1, 5.0), ("coll", (0, 1), 1.0, 0)]] * 4
    for first_step, set_aside in ((0, 1), (10, 0)):
        path = tmp_path / f"w{first_step}.sqlite"
        wj.write_job(path, 2, steps, first_step=first_step)
        res = load([path], cache=False)
        assert res.startup["collectives"] == set_aside
        named = res.late[res.late["seq"] == 0]
        assert len(named) == 1 - set_aside
        if not set_aside:
            assert named.iloc[0]["delay_ms"] == pytest.approx(7.6, abs=1e-6) and named.iloc[0]["rank"] == 1


def test_a_slow_first_call_on_the_host_is_no_setup(tmp_path):
    """gloo connects its pairs in init_process_group: its first scatter taking 10.9 ms against
    0.5 ms later is that run's jitter, not setup, in every run alike (a rule that flipped between
    identical runs made the gate report keys missing)."""
    steps = [[("compute", 0, 1.0), ("compute", 1, 1.0), ("coll", (0, 1), 10.9, 0)]]
    steps += [[("compute", 0, 1.0), ("compute", 1, 1.0), ("coll", (0, 1), 0.5, 0)]] * 5
    path = tmp_path / "gloo.sqlite"
    wj.write_job(path, 2, steps, first_step=0)
    res = load([path], cache=False)
    assert len(res.setup) == 0
    assert int(res.summary["count"].sum()) == 6


def test_the_headline_what_if_gives_what_the_warm_up_steps_would_save(tmp_path):
    """Rank 1 is 307 ms late to step 0's second collective, and step 1 is slow on both ranks:
    both are warm-up steps. The Diagnosis names rank 1; the headline what-if, which leaves the
    warm-up steps out of its per-step figure, says what it would save in them."""
    steps = [[("coll", (0, 1), 1.0, 0), ("compute", 0, 5.0), ("compute", 1, 312.0), ("coll", (0, 1), 1.0, 0)]]
    steps += [[("compute", 0, 100.0), ("compute", 1, 100.0), ("coll", (0, 1), 1.0, 0)]]
    steps += [[("compute", 0, 5.0), ("compute", 1, 5.0), ("coll", (0, 1), 1.0, 0)]] * 4
    path = tmp_path / "warm.sqlite"
    wj.write_job(path, 2, steps, first_step=0)
    res = load([path], cache=False)
    assert res.warmup["steps"] == [0, 1]
    late = res.late
    assert late["rank"].tolist() == [1] and late["delay_ms"].tolist() == pytest.approx([307.0], abs=1e-6)
    from nsyscomm.views import diagnosis_out

    text = "\n".join(diagnosis_out.lines(res))
    assert "rank 1 arrived late 1 time(s), 307.000 ms" in text, text
    best = next(line for line in text.splitlines() if line.startswith("best what-if"))
    assert "307.000 ms in all in warm-up step(s) 0, 1" in best, best
