"""Steps: from the wrapper's step field, or from torch.profiler's ProfilerStep#N ranges."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

import nsyscomm
from tests.conftest import SAMPLES


def test_profiler_step_ranges_label_calls_without_wrapper(tmp_path):
    """Two ProfilerStep ranges split each rank's main thread at the median call start."""
    job = tmp_path / "job"
    shutil.copytree(SAMPLES / "synthetic_nowrapper_2node", job)
    expected = {}
    for f in sorted(job.glob("*.sqlite")):
        con = sqlite3.connect(f)
        tids = [r[0] for r in con.execute("SELECT DISTINCT globalTid FROM NVTX_EVENTS WHERE text LIKE 'nccl:%'")]
        for gtid in tids:
            starts = sorted(
                r[0]
                for r in con.execute(
                    "SELECT start FROM NVTX_EVENTS WHERE text LIKE 'nccl:%' AND globalTid = ?", (gtid,)
                )
            )
            cut = starts[len(starts) // 2]
            con.execute(
                'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                "VALUES (?, ?, 59, 'ProfilerStep#7', ?, 0)",
                (starts[0] - 10, cut - 1, gtid),
            )
            con.execute(
                'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                "VALUES (?, ?, 59, 'ProfilerStep#8', ?, 0)",
                (cut, starts[-1] + 10**6, gtid),
            )
            expected[(f.name, gtid & 0xFFFFFF)] = cut
        con.commit()
        con.close()
    res = nsyscomm.load(job)
    c = res.collectives
    torch_rows = c[c.source == "torch_range"]
    assert len(torch_rows) > 0
    for r in torch_rows.itertuples():
        cut = expected[(r.report, r.tid)]
        assert r.step == (7 if r.cpu_start < cut else 8)
    steps = res.steps
    assert set(steps.step) == {7, 8}
    assert steps.calls.sum() == len(c[c.step.notna()])


def test_wrapper_steps_and_step_table():
    """The step table against the generator's ground truth (the calls it made, their step and
    duration), not against nsyscomm's own collectives."""
    res = nsyscomm.load(SAMPLES / "synthetic_ddp_4rank.sqlite")
    steps = res.steps.set_index("step")
    truth = json.loads((SAMPLES / "synthetic_ddp_4rank.truth.json").read_text())
    per_step: dict = {}
    for row in truth["collectives"]:
        if row["step"] is not None:
            per_step.setdefault(row["step"], []).append(row)
    assert len(per_step) >= 2 and sorted(steps.index) == sorted(per_step)
    for step, rows in per_step.items():
        assert steps.loc[step, "calls"] == len(rows)
        assert steps.loc[step, "comm_ms"] == pytest.approx(sum(r["duration_ns"] for r in rows) / 1e6, rel=1e-12)
        by_rank: dict = {}
        for r in rows:
            by_rank[r["rank"]] = by_rank.get(r["rank"], 0) + r["duration_ns"]
        assert steps.loc[step, "max_rank_comm_ms"] == pytest.approx(max(by_rank.values()) / 1e6, rel=1e-12)
