"""The what-if replay: exact truth on generated jobs (tests/support/whatif_jobs.py), the engine's own
rules, the views' contract."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nsyscomm.analyses import replay, whatif
from nsyscomm.api import load
from tests.conftest import SAMPLES
from tests.support.whatif_jobs import BYTES, CALLER, write_job

KEY = f"all_reduce {BYTES} {CALLER}"


def _row(result, scenario):
    return next(r for r in result.what_if if r["scenario"] == scenario)


@pytest.fixture(scope="module")
def propagation_job(tmp_path_factory):
    """3 ranks, 2 steps. Each step: ranks 0,1 compute, all-reduce on their group (pg 1, 0.1 ms),
    compute 0.5 ms; rank 2 computes; all-reduce of all three (pg 0, 0.1 ms).
    Step 1: everyone computes 1 ms (rank 2: 1.2). Step 2: rank 1 computes 1.3 ms (0.3 late at
    pg 1), rank 2 2.5 ms (the straggler of the world all-reduce)."""
    p = tmp_path_factory.mktemp("whatif") / "propagation.sqlite"
    steps = [
        [
            ("compute", 0, 1),
            ("compute", 1, 1),
            ("coll", (0, 1), 0.1, 1),
            ("compute", 0, 0.5),
            ("compute", 1, 0.5),
            ("compute", 2, 1.2),
            ("coll", (0, 1, 2), 0.1, 0),
        ],
        [
            ("compute", 0, 1),
            ("compute", 1, 1.3),
            ("coll", (0, 1), 0.1, 1),
            ("compute", 0, 0.5),
            ("compute", 1, 0.5),
            ("compute", 2, 2.5),
            ("coll", (0, 1, 2), 0.1, 0),
        ],
    ]
    write_job(p, 3, steps)
    return load([p], cache=False)


def test_no_straggler_removes_waiting_and_propagates(propagation_job):
    # measured (ms from T0): step 1: pg1 at 1.0-1.1, world arrivals 1.6/1.6/1.2, ends 1.7 ->
    # step 1 = 1.7 - 1.0 (its first call) = 0.7; step 2: pg1 arrivals 2.7/3.0, ends 3.1; world
    # arrivals 3.6/3.6/4.2, ends 4.3 -> step 2 = 4.3 - 1.7 = 2.6.
    # no straggler: step 1: pg1 1.0-1.1; world starts at its first arrival (rank 2, 1.2), ends 1.3
    # -> 0.3. Step 2 (everyone from 1.3): pg1 arrivals 2.3/2.6 -> 2.3-2.4; world arrivals 2.9,
    # 2.9, 3.8 -> ends 3.0 -> 1.7. The step-2 gain includes step 1's, carried along each rank.
    r = _row(propagation_job, "no_straggler")
    assert [s["step"] for s in r["steps"]] == [1, 2]
    assert [s["step_ms_before"] for s in r["steps"]] == pytest.approx([0.7, 2.6], abs=1e-6)
    assert [s["step_ms_after"] for s in r["steps"]] == pytest.approx([0.3, 1.7], abs=1e-6)
    assert r["step_ms_before"] == pytest.approx(1.65, abs=1e-6)
    assert r["step_ms_after"] == pytest.approx(1.0, abs=1e-6)
    assert r["saved_ms"] == pytest.approx(0.65, abs=1e-6)
    assert r["slowdown"] == pytest.approx(1.65, abs=1e-6)
    assert r["top_keys"][0]["key"] == KEY and r["top_keys"][0]["saved_ms"] == pytest.approx(1.3, abs=1e-6)


def test_scenarios_without_data_say_why(propagation_job):
    names = {r["scenario"] for r in propagation_job.what_if}
    assert "full_overlap" not in names and "reference_busbw" not in names
    notes = propagation_job.what_if_analysis["notes"]
    assert [n for n in notes if n.startswith(("full_overlap: not computed", "reference_busbw: not computed"))] == [
        "full_overlap: not computed, the job has no GPU kernel timing (no exposed time)",
        "reference_busbw: not computed, no nccl-tests reference curve (--nccl-log)",
    ]
    assert "first rank arrives" in " ".join(notes)  # the model's assumptions are in the output


@pytest.fixture(scope="module")
def late_rank_job(tmp_path_factory):
    """3 ranks, 3 steps of (compute 1 ms, all-reduce of all, 0.2 ms); rank 2 computes 0.6 ms
    more in step 2."""
    p = tmp_path_factory.mktemp("whatif") / "late_rank.sqlite"
    steps = []
    for s in (1, 2, 3):
        ev = [("compute", r, 1.0 + (0.6 if (s == 2 and r == 2) else 0.0)) for r in range(3)]
        steps.append(ev + [("coll", (0, 1, 2), 0.2, 0)])
    write_job(p, 3, steps)
    return load([p], cache=False)


def test_ideal_and_attribution(late_rank_job):
    # measured: step 1 = 0.2 (from its first call), step 2 = 1.0 + 0.6 + 0.2 = 1.8, step 3 = 1.2.
    # ideal: the time before each call at its collective's median (1.0), transfers 0.2:
    # 0.2, 1.2, 1.2. S = 3.2 / 2.6 for rank 2 and the all-reduce; 1.0 for ranks 0 and 1.
    ideal = _row(late_rank_job, "ideal")
    assert [s["step_ms_before"] for s in ideal["steps"]] == pytest.approx([0.2, 1.8, 1.2], abs=1e-6)
    assert [s["step_ms_after"] for s in ideal["steps"]] == pytest.approx([0.2, 1.2, 1.2], abs=1e-6)
    assert ideal["slowdown"] == pytest.approx(3.2 / 2.6, abs=1e-6)
    ns = _row(late_rank_job, "no_straggler")
    assert ns["saved_ms"] == pytest.approx(0.2, abs=1e-6)  # 0.6 saved in one of 3 steps
    attr = {(a["by"], a["key"]): a["slowdown"] for a in late_rank_job.attribution}
    assert attr[("rank", 2)] == pytest.approx(3.2 / 2.6, abs=1e-6)
    assert attr[("rank", 0)] == pytest.approx(1.0, abs=1e-6)
    assert attr[("op", KEY)] == pytest.approx(3.2 / 2.6, abs=1e-6)
    top = max((a for a in late_rank_job.attribution if a["by"] == "rank"), key=lambda a: a["slowdown"])
    assert top["key"] == 2


def test_reference_busbw(tmp_path):
    # 2 ranks, 2 steps of (compute 1 ms, all-reduce 0.5 ms). Reference: 40 GB/s busbw; an
    # all-reduce of 2 ranks moves bytes x 2(n-1)/n = bytes: 4 MB / 40 GB/s = 0.1 ms.
    p = tmp_path / "ref.sqlite"
    write_job(p, 2, [[("compute", 0, 1), ("compute", 1, 1), ("coll", (0, 1), 0.5, 0)]] * 2)
    res = load([p], cache=False)
    res.reference = pd.DataFrame(
        {"op": ["all_reduce", "all_reduce"], "bytes": [1_000_000, 16_000_000], "busbw_GBps": [40.0, 40.0]}
    )
    r = _row(res, "reference_busbw")
    assert [s["step_ms_before"] for s in r["steps"]] == pytest.approx([0.5, 1.5], abs=1e-6)
    assert [s["step_ms_after"] for s in r["steps"]] == pytest.approx([0.1, 1.1], abs=1e-6)
    assert r["saved_ms"] == pytest.approx(0.4, abs=1e-6)


def test_json_contract(propagation_job):
    from nsyscomm.views import json_out

    doc = json.loads(json_out.dumps(propagation_job))
    assert doc["schema"] == 3
    rows = doc["diagnosis"]["what_if"]
    assert rows and all({"scenario", "saved_ms", "step_ms_before", "step_ms_after", "slowdown"} <= set(r) for r in rows)
    assert [r["saved_ms"] for r in rows] == sorted((r["saved_ms"] for r in rows), reverse=True)
    attr = doc["diagnosis"]["attribution"]
    assert attr and all(set(a) == {"by", "key", "slowdown"} and a["by"] in ("rank", "op") for a in attr)


def test_text_block(propagation_job):
    from rich.console import Console

    from nsyscomm.views import text

    con = Console(record=True, width=200)
    text.render(propagation_job, con)
    out = con.export_text()
    assert "What-if" in out and "no_straggler" in out


@pytest.mark.parametrize(
    "name",
    [
        "synthetic_ddp_4rank.sqlite",
        "synthetic_fsdp_8rank.sqlite",
        "synthetic_gloo_cpu.sqlite",
        "synthetic_nowrapper_2node",
    ],
)
def test_replay_as_measured_reproduces_every_call(name):
    p = SAMPLES / name
    if not p.exists():
        pytest.skip(f"sample {name} not generated")
    res = load([p], cache=False)
    ops = res._query("replay_ops")
    m = whatif.from_ops(ops)
    start, end = replay.replay(m.graph, m.dur, m.delay)
    calls = m.extra["call_node"]  # a host-timed job's replay holds its host events too
    assert len(calls) == len(ops)
    np.testing.assert_allclose(end[calls], ops["end_ns"].to_numpy(float) / 1e6, atol=1e-6)
    np.testing.assert_allclose(start[calls], ops["start_ns"].to_numpy(float) / 1e6, atol=1e-6)


def test_engine_groups_and_cycles():
    # rank 0: a (1) -> c0; rank 1: b (3) -> c1; c0, c1 one collective (transfer 0.5); then d, e (1 each)
    g = replay.build(6, [0, 1, 2, 3], [2, 3, 4, 5], group=[-1, -1, 9, 9, -1, -1])
    _, end = replay.replay(g, [1, 3, 0.5, 0.5, 1, 1])
    assert end.tolist() == [1, 3, 3.5, 3.5, 4.5, 4.5]
    _, end = replay.replay(g, [1, 3, 0.5, 0.5, 1, 1], reduce="min")
    assert end.tolist() == [1, 3, 1.5, 1.5, 2.5, 2.5]
    # c0 -> x -> c1 with c0 and c1 one collective: x would run both before and after it
    with pytest.raises(replay.CycleError):
        replay.build(3, [0, 2], [2, 1], group=[5, 5, -1])


def test_export_whatif_format(late_rank_job, tmp_path):
    """The late-rank job in the OSDI'25 artifact's trace format: per step and rank the compute
    before the call and the call, times as constructed."""
    from nsyscomm.analyses import stragglers, trace_export
    from nsyscomm.ingest.straggler import trace as straggler_trace

    files = trace_export.write(late_rank_job, tmp_path, "late")
    assert [f.name for f in files] == ["trace-late.parquet", "meta-late.yaml"]
    ops, meta = straggler_trace.read(files[0])
    assert (meta["dp_size"], meta["pp_size"], meta["world_size"]) == (3, 1, 3)
    s2 = ops[ops["step"] == 2].set_index(["optype", "rank"])
    fc = s2.loc["forward-compute"]
    rs = s2.loc["grads-reduce-scatter"]
    # step 2 starts when step 1's all-reduce ends; rank 2 computes 1.6 ms, the others 1.0 and wait 0.6
    assert fc["duration"].to_dict() == pytest.approx({0: 1.0e-3, 1: 1.0e-3, 2: 1.6e-3}, abs=1e-7)
    assert rs["start_ts"].to_dict() == pytest.approx({0: 1.0e-3, 1: 1.0e-3, 2: 1.6e-3}, abs=1e-7)
    assert rs["duration"].to_dict() == pytest.approx({0: 0.8e-3, 1: 0.8e-3, 2: 0.2e-3}, abs=1e-7)
    assert set(s2.index.get_level_values(0)) == set(trace_export.TAIL) | {
        "forward-compute",
        "backward-compute",
        "grads-reduce-scatter",
    }
    t = stragglers.prepare(ops, meta)
    _, _, steps = t.run()
    assert steps[1] == pytest.approx(1.8e-3, abs=1e-7)


def test_trace_what_if_timeline(propagation_job, tmp_path):
    """nsyscomm trace --what-if no_straggler: the replayed calls beside the measured ones; the
    world all-reduce of step 2 ends at 3.0 ms (see the propagation job)."""
    from nsyscomm.views import trace as tr
    from nsyscomm.views import whatif_trace

    origin = tr._origin(tr.calls(propagation_job, None))
    ev = whatif_trace.events(propagation_job, "no_straggler", origin)
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == 10 and {e["pid"] for e in xs} == {whatif_trace.PID_BASE + r for r in range(3)}
    last = max(e["ts"] + e["dur"] for e in xs)
    # origin is the first call (1.0 ms after T0): the replayed job ends at 3.0 ms
    assert last == pytest.approx((3.0 - 1.0) * 1000, abs=1e-3)


def test_html_report_section(propagation_job):
    from nsyscomm.views import html_report

    page = html_report.render(propagation_job)
    assert 'id="whatif"' in page
    # the per-step bars: measured and no_straggler for both steps, with their values
    assert "step 2: measured 2.600 ms" in page and "step 2: no_straggler 1.700 ms" in page
    assert "rank 1: S = " in page or "rank 2: S = " in page


def test_full_overlap_takes_the_exposed_part_off():
    """Calls as sql/replay_ops.sql gives them: 2 ranks, 2 steps of (compute 1 ms, all-reduce 0.5 ms
    of which 0.3 ms no compute hides). Hidden: 0.2 ms per call remain -> steps 0.2 and 1.2 ms."""
    ms = 1_000_000
    rows = []
    for rank in (0, 1):
        for step, (s, e) in enumerate(((1.0, 1.5), (2.5, 3.0)), start=1):
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "op": "all_reduce",
                    "bytes": 1024,
                    "caller": "c",
                    "group_size": 2,
                    "sync_id": step,
                    "start_ns": int(s * ms),
                    "end_ns": int(e * ms),
                    "exposed_ns": 0.3 * ms,
                }
            )
    m = whatif.from_ops(pd.DataFrame(rows))
    out = whatif.analyse(m)
    r = next(x for x in out["what_if"] if x["scenario"] == "full_overlap")
    assert [s["step_ms_before"] for s in r["steps"]] == pytest.approx([0.5, 1.5], abs=1e-9)
    assert [s["step_ms_after"] for s in r["steps"]] == pytest.approx([0.2, 1.2], abs=1e-9)
    assert r["saved_ms"] == pytest.approx(0.3, abs=1e-9)


def test_no_step_time_is_negative_when_a_call_ends_a_step_late():
    """Step 0's asynchronous call (0-50 ms) is waited for in step 1, whose calls run 10-30 ms:
    step 0 ends at 50 ms, so step 1 ends there too (0 ms, never -20), and step 2 (55-70 ms)
    takes 20 ms from 50. The same in the what-if's measured steps and in the step spans."""
    import duckdb

    from nsyscomm import duck
    from nsyscomm.analyses.whatif import Model

    ms = 1_000_000
    start = np.array([0.0, 10.0, 20.0, 55.0])
    end = np.array([50.0, 20.0, 30.0, 70.0])
    step_of = np.array([0, 1, 1, 2])
    m = Model(None, start, start, step_of, [0, 1, 2], step_of, {}, start, start)  # type: ignore[arg-type]
    assert m.step_ms(start, end).tolist() == [50.0, 0.0, 20.0]

    con = duckdb.connect()
    con.execute("CREATE TABLE collectives (step BIGINT, exec_start BIGINT, exec_end BIGINT, setup BOOLEAN)")
    rows = [(int(s), int(a * ms), int(b * ms), False) for s, a, b in zip(step_of, start, end)]
    con.executemany("INSERT INTO collectives VALUES (?, ?, ?, ?)", rows)
    got = con.execute(duck.sql("step_spans")).fetchall()
    assert [(r[0], r[4] / ms) for r in got] == [(0, 50.0), (1, 0.0), (2, 20.0)]
