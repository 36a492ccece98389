"""The OSDI'25 what-if artifact's trace format as a source, and nsyscomm's replay held against
the artifact's own published results on its real trace (../shared/real/straggler_analysis)."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from nsyscomm.analyses import stragglers
from nsyscomm.cli import main
from nsyscomm.errors import InputError
from nsyscomm.ingest.straggler import trace as straggler_trace
from tests.conftest import real_file


@pytest.fixture(scope="module")
def st():
    trace = real_file("straggler_analysis/trace-ST.parquet")
    ops, meta = straggler_trace.read(trace)
    t = stragglers.prepare(ops, meta)
    expected = {k: json.loads(real_file(f"straggler_analysis/{k}-ST.json").read_text()) for k in ("result", "ms", "mw")}
    return t, stragglers.analyse(t), expected


def _top(d: dict):
    return str(max(d.items(), key=lambda kv: kv[1])[0])


def test_replay_as_measured_is_the_trace(st):
    t, got, _ = st
    _, end, steps = t.run()
    start = t.ops["start_ts"].to_numpy(float)
    np.testing.assert_allclose(end, start + t.ops["duration"].to_numpy(float), atol=1e-5)
    np.testing.assert_allclose(steps, list(got["step_t_base"].values()), atol=1e-5)


def test_agreement_with_the_artifact(st):
    _, got, exp = st
    res = exp["result"]
    # the published blocking slowdown S within 2%
    assert got["blocking_slowdown"] == pytest.approx(res["blocking_slowdown"], rel=0.02)
    assert got["launch_slowdown"] == pytest.approx(res["launch_slowdown"], rel=0.02)
    # per-step no-straggler (ideal) and no-delay step times within 2% at the median
    for ours, theirs in (("step_t_noblk", "step_t_noblk"), ("step_t_nodelay", "step_t_nodelay")):
        err = [abs(got[ours][int(s)] / v - 1) for s, v in res[theirs].items()]
        assert len(err) == 32 and np.median(err) < 0.02
    # the same top attribution: DP rank, stage, op type
    for by in ("dp_rank", "stage", "optype"):
        assert _top(got[f"blocking_decompose_by_{by}"]) == _top(res[f"blocking_decompose_by_{by}"]), by
    assert _top(got["blocking_decompose_by_stage"]) == "3"
    assert got["ms"]["Ms"] == pytest.approx(exp["ms"]["Ms"], rel=0.02)
    assert got["mw"]["Mw"] == pytest.approx(exp["mw"]["Mw"], rel=0.05)


def test_summarize_reads_the_trace_folder():
    folder = real_file("straggler_analysis/trace-ST.parquet").parent
    r = CliRunner().invoke(main, ["summarize", str(folder), "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == 3 and len(doc["ranks"]) == 8
    ops = {row["op"] for row in doc["summary"]}
    assert {"reduce_scatter", "all_gather", "all_reduce", "send", "recv"} <= ops
    d = doc["diagnosis"]
    assert d["straggler_model"]["blocking_slowdown"] == pytest.approx(1.1787, rel=0.02)
    tops = {}
    for a in d["attribution"]:
        if a["slowdown"] > tops.get(a["by"], (None, 0))[1]:
            tops[a["by"]] = (a["key"], a["slowdown"])
    assert tops["stage"][0] == 3 and tops["optype"][0] == "forward-compute"
    scen = {w["scenario"]: w for w in d["what_if"]}
    assert {"no_straggler", "ideal", "full_overlap"} <= set(scen)
    assert scen["ideal"]["step_ms_after"] == pytest.approx(1843.3, rel=0.01)
    # both figures beside the study's own published results for this trace (result-ST.json:
    # step_t_noblk, the step time without blocking, in seconds; blocking_slowdown)
    published = json.loads((folder / "result-ST.json").read_text())
    noblk_ms = 1e3 * statistics.median(published["step_t_noblk"].values())
    assert scen["ideal"]["step_ms_after"] == pytest.approx(noblk_ms, rel=0.01)
    assert d["straggler_model"]["blocking_slowdown"] == pytest.approx(published["blocking_slowdown"], rel=0.02)


def _tiny(tmp_path, meta: str | None = "dp_size: 1\npp_size: 1\nworld_size: 1\n"):
    df = pd.DataFrame(
        {
            "dp_rank": [0],
            "stage": [0],
            "rank": [0],
            "step": [1],
            "optype": ["optimizer"],
            "start_ts": [0.0],
            "duration": [0.1],
            "seq_id": [0],
            "mc": [0],
            "mb_id": [-1],
            "gmc": [0],
        }
    )
    p = tmp_path / "trace-T.parquet"
    df.to_parquet(p)
    if meta is not None:
        (tmp_path / "meta-T.yaml").write_text(meta)
    return p


def test_bad_input_is_one_line_and_status_2(tmp_path):
    p = _tiny(tmp_path, meta=None)
    r = CliRunner().invoke(main, ["summarize", str(p), "--no-cache"])
    assert r.exit_code == 2 and "meta-T.yaml" in r.output and "Traceback" not in r.output
    (tmp_path / "meta-T.yaml").write_text("dp_size: two\n")
    with pytest.raises(InputError, match="dp_size must be a positive integer"):
        straggler_trace.read(p)
    pd.DataFrame({"rank": [0]}).to_parquet(p)
    (tmp_path / "meta-T.yaml").write_text("dp_size: 1\n")
    with pytest.raises(InputError, match="missing column"):
        straggler_trace.read(p)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["meta-T.yaml", "trace-T.parquet"]  # nothing written beside


class _Sum:
    """A trace of one step whose time is the sum of its ops' durations (one chain)."""

    class graph:  # noqa: N801 - the attribute stragglers reads
        n = 2

    dur = np.array([1.0, 5.0])  # op 0 (the masked stage) faster than its type's typical 2.0
    ideal_dur = np.array([2.0, 3.0])

    def run(self, dur=None, delay=None):
        d = self.dur if dur is None else dur
        return None, None, np.array([float(np.sum(d))])


def test_removing_a_stage_that_does_not_straggle_saves_nothing():
    """M_S's removal shortens only what is slower than typical: the masked op (1.0 against a
    typical 2.0) straggles not at all, so its share is 0, never negative (replacing it by the
    typical 2.0 made the step 1.0 longer: -100% of the slowdown)."""
    t = _Sum()
    nodelay, ideal = t.run()[2], t.run(dur=t.ideal_dur)[2]  # 6.0 and 5.0
    got = stragglers._explain(t, np.array([True, False]), nodelay, ideal)  # type: ignore[arg-type]
    assert got["rem"] == 0.0 and got["trem"] == 6.0
    assert got["add"] == 0.0 and got["tadd"] == 5.0
    # the other op (5.0 against 3.0) explains the whole slowdown both ways
    got = stragglers._explain(t, np.array([False, True]), nodelay, ideal)  # type: ignore[arg-type]
    assert got["rem"] == 2.0 and got["add"] == 2.0
    # no slowdown to share: None, not a division by zero or a sign flip
    assert stragglers._explain(t, np.array([True, False]), ideal, ideal)["rem"] is None  # type: ignore[arg-type]
