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


def test_calls_issued_in_either_order_on_two_groups(tmp_path):
    """Rank 0 issues an async all_reduce on group 0, then one on group 1; rank 1 the other way
    round; both then wait for both. The issues wait for nobody, so the replay has no cycle: the job
    keeps its host model and the replay with nothing changed gives back every call."""
    from nsyscomm import nvtx_format as fmt
    from nsyscomm.analyses import replay
    from nsyscomm.synth import Report, write_sqlite

    ms, t0 = 1_000_000, 1_000_000_000
    rep = Report("order.sqlite", cuda=False)
    procs = [rep.process(100 + 10 * r, "python3", {100 + 10 * r: "python3", 101 + 10 * r: "gloo"}) for r in (0, 1)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, t0 - ms, registered=fmt.format_rank_marker(r, r, 2, "h"), domain=1)
        order = (0, 1) if r == 0 else (1, 0)
        for i, pg in enumerate(order):
            msg = fmt.format_collective(
                "all_reduce", api="all_reduce", bytes=4096, dtype="float32", numel=1024, pg=pg, gsize=2,
                seq=0, async_op=True, step=0, caller="job.py:1 main",
            )  # fmt: skip
            issue = t0 + i * ms
            rep.range(p, p.pid, issue, issue + 100_000, registered=msg, domain=1)
            ident = fmt.format_ident("all_reduce", pg, 0)
            rep.mark(p, p.pid + 1, t0 + 3 * ms + pg * ms, registered=fmt.format_done(ident), domain=1)
            rep.range(
                p, p.pid, t0 + (10 + i) * ms, t0 + (10 + i) * ms + 10_000, registered=fmt.format_wait(ident), domain=1
            )
    write_sqlite(rep, tmp_path / "order.sqlite", seed=0)
    res = nsyscomm.load(tmp_path / "order.sqlite", cache=False)
    ops = res._query("replay_ops")
    m = whatif.from_ops(ops)
    assert "arrival" in m.extra  # the host model, not the chained calls
    start, end = replay.replay(m.graph, m.dur, m.delay)
    calls = m.extra["call_node"]
    np.testing.assert_allclose(end[calls], ops["end_ns"].to_numpy(float) / 1e6, atol=1e-6)
    np.testing.assert_allclose(start[calls], ops["start_ns"].to_numpy(float) / 1e6, atol=1e-6)
