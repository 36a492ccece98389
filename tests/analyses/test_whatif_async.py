"""The what-if of a host-timed (gloo) job whose asynchronous calls overlap its compute, on generated
reports whose truth is simulated apart from nsyscomm (tests/support/async_jobs.py): removing the
straggler's sleep must give back the program's own step periods without it, never less -- an
asynchronous call's time from its issue to its wait is the rank's compute, which no scenario
removes. One call per step (DDP's bucket) and three queued on one group (ZeRO's broadcasts)."""

from __future__ import annotations

import numpy as np
import pytest

import nsyscomm
from nsyscomm.analyses import whatif, whatif_check, whatif_result
from tests.support import async_jobs

STEPS = 6
SLEEPS = {
    "one sleep": {3: (1, 50.0)},
    "both ranks sleep": {2: (0, 30.0), 4: (1, 50.0)},
}


def _job(tmp_path, calls: int, late: dict):
    sim = async_jobs.simulate(STEPS, calls, late)
    res = nsyscomm.load(async_jobs.write(tmp_path / "async.sqlite", sim), cache=False)
    return res, async_jobs.step_periods(sim), async_jobs.step_periods(async_jobs.simulate(STEPS, calls))


def _row(res, scenario: str) -> dict:
    (row,) = [w for w in whatif_result.of_result(res)["what_if"] if w["scenario"] == scenario]
    return row


@pytest.mark.parametrize("calls", [1, 3])
@pytest.mark.parametrize("late", list(SLEEPS))
def test_removing_the_sleep_gives_the_program_without_it(tmp_path, calls, late):
    res, before, without = _job(tmp_path, calls, SLEEPS[late])
    row = _row(res, "no_straggler")
    assert [s["step_ms_before"] for s in row["steps"]] == pytest.approx(before, abs=1e-6)
    assert [s["step_ms_after"] for s in row["steps"]] == pytest.approx(without, abs=1e-6)
    # (a sleep's step saves it whole where the other rank was not behind: then part of it only
    # delayed the job, the rest the other rank's lag; the job's figures leave warm-up steps out)
    saved = [b - a for b, a in zip(before, without)]
    if late == "one sleep":
        ((step, (_, ms)),) = SLEEPS[late].items()
        assert saved[step] == pytest.approx(ms, abs=1e-6)
    counted = [i for i, s in enumerate(row["steps"]) if not s.get("warmup")]
    assert row["total_saved_ms"] == pytest.approx(sum(saved[i] for i in counted), abs=1e-6)


@pytest.mark.parametrize("calls", [1, 3])
def test_no_step_below_its_ranks_compute(tmp_path, calls):
    """Every step but the first (timed from its first call) holds each rank's compute and the
    optimizer's: no scenario leaves less, and the own-work floor the checks apply says as much."""
    res, _, _ = _job(tmp_path, calls, SLEEPS["both ranks sleep"])
    compute = async_jobs.COMPUTE_MS + async_jobs.OPTIMIZER_MS
    for w in whatif_result.of_result(res)["what_if"]:
        assert all(s["step_ms_after"] >= compute for s in w["steps"][1:]), (w["scenario"], w["steps"])
    m = whatif.from_ops(res._query("replay_ops"))
    dur, delay, _ = whatif.scenarios(m)["no_straggler"]
    floor = whatif_check.own_work(m, dur, delay)
    assert np.all(floor[1:] >= compute), floor
    assert np.all(floor[1:] <= m.run(dur, delay, "max")[1:] + 1e-6), floor
