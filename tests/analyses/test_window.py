"""`nsyscomm run --steps A:B`: every rank keeps the same steps. Generated reports whose truth is
known by construction: each rank's calls outside its own capture range are dropped, a step the
capture's edge cut on some rank is left out on every rank with one line, and a report without a
capture range keeps an incomplete last step (a hang is no window's edge)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import nsyscomm
from nsyscomm import nvtx_format
from nsyscomm.synth import Report, write_sqlite
from tests.conftest import DATA, DONE_ENV, done_ranks, job_did_its_work, run_job

MS = 1_000_000


def _job(tmp_path, windowed: bool):
    """Two ranks, steps 1..4 of two all_reduces each (rank r starts each call r x 0.1 ms after
    rank 0). Rank 0 was recorded from step 1 on and its window never closed in the capture, but
    its second step-4 call was not recorded (the capture stopped); rank 1's window is steps 2 and
    3 exactly (its step-1 and step-4 calls are recorded, outside its range)."""
    rep = Report("win.sqlite", cuda=False)
    procs = [rep.process(100 + r, "python3") for r in range(2)]
    t0 = 10 * MS
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, t0, registered=nvtx_format.format_rank_marker(r, r, 2, "h"), domain=1)

    def at(step: int, i: int, r: int) -> int:
        return t0 + step * 10 * MS + i * 4 * MS + r * 100_000

    if windowed:
        rep.range(procs[0], procs[0].pid, at(2, 0, 0) - MS, None, registered=nvtx_format.CAPTURE_RANGE, domain=1)
        rep.range(
            procs[1], procs[1].pid, at(2, 0, 1) - MS, at(4, 0, 1) - MS, registered=nvtx_format.CAPTURE_RANGE, domain=1
        )
    for step in (1, 2, 3, 4):
        for i in range(2):
            for r, p in enumerate(procs):
                if (r, step, i) == (0, 4, 1):
                    continue  # the capture stopped before it
                msg = nvtx_format.format_collective(
                    "all_reduce",
                    api="all_reduce",
                    bytes=4096,
                    dtype="float32",
                    numel=1024,
                    pg=0,
                    gsize=2,
                    seq=2 * step + i,
                    step=step,
                    caller="win.py:1 main",
                )
                s = at(step, i, r)
                rep.range(p, p.pid, s, s + MS, registered=msg, domain=1)
    write_sqlite(rep, tmp_path / "win.sqlite", seed=0)
    return nsyscomm.load(tmp_path / "win.sqlite", cache=False)


def test_every_rank_keeps_the_same_steps(tmp_path):
    res = _job(tmp_path, windowed=True)
    c = res.collectives
    # rank 0's step 1 lies before its window; rank 1's step 1 and 4 outside its own; step 4, cut
    # on rank 1 (rank 0's one call there has no partner), is left out on both
    assert sorted(map(tuple, c[["rank", "step"]].drop_duplicates().values.tolist())) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert (c.groupby(["rank", "step"]).size() == 2).all()
    lines = [w for w in res.warnings if w.startswith("capture window:")]
    assert lines == [
        "capture window: step 4 (last of the window) cut on rank(s) 1: left out on every rank (1 call(s)), "
        "so that every rank keeps the same steps"
    ]
    assert not any("fewer ranks than their group size" in w for w in res.warnings)


def test_without_a_window_an_incomplete_last_step_stays(tmp_path):
    res = _job(tmp_path, windowed=False)
    c = res.collectives
    assert sorted(c["step"].unique().tolist()) == [1, 2, 3, 4]
    assert len(c) == 15 and not any(w.startswith("capture window:") for w in res.warnings)


@pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None,
    reason="nsys and torchrun are needed for the real run",
)
def test_real_window_keeps_the_same_steps_on_every_rank(tmp_path):
    """tests/data/window_job.py under `run --steps 2:4`: both ranks keep steps 2 and 3, two
    all_reduces each, and no_straggler saves rank 1's sleep in step 2 (as the program measured
    it) at the line after it. Before, about one run in three kept a step-4 call on rank 0 only,
    which halved the median step and dropped step 2 as warm-up."""
    env = dict(os.environ, **{DONE_ENV: str(tmp_path)})
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    r = run_job(tmp_path / "out", DATA / "window_job.py", options=("--steps", "2:4", "--format", "json"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(tmp_path), 2), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    c = nsyscomm.load(r.out, cache=False).collectives
    assert {k: int(v) for k, v in c.groupby(["rank", "step"]).size().items()} == {
        (0, 2): 2,
        (0, 3): 2,
        (1, 2): 2,
        (1, 3): 2,
    }
    slept = float((tmp_path / "slept.1").read_text())
    assert slept >= 20
    assert 2 not in doc["warmup"]["steps"]
    ns = next(w for w in doc["diagnosis"]["what_if"] if w["scenario"] == "no_straggler")
    line = next(i for i, t in enumerate((DATA / "window_job.py").read_text().splitlines(), 1) if "AFTER_SLEEP" in t)
    at_sleep = next(k for k in ns["top_keys"] if k["key"].endswith(f"window_job.py:{line} main"))
    assert at_sleep["saved_ms"] == pytest.approx(slept, rel=0.25), (at_sleep, slept)


def test_a_hang_at_the_window_s_last_step_stays(tmp_path):
    """A rank stuck in its last step's collective (its range never ended) is a hang for the hang
    analysis, not the capture's edge: that step is kept."""
    rep = Report("hang.sqlite", cuda=False)
    procs = [rep.process(100 + r, "python3") for r in range(2)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, MS, registered=nvtx_format.format_rank_marker(r, r, 2, "h"), domain=1)
        rep.range(p, p.pid, 2 * MS, None, registered=nvtx_format.CAPTURE_RANGE, domain=1)
    for step in (2, 3):
        for r, p in enumerate(procs):
            if (step, r) == (3, 1):
                continue  # rank 1 never came: rank 0 waits for it forever
            msg = nvtx_format.format_collective(
                "all_reduce", api="all_reduce", bytes=8, dtype="float32", numel=2, pg=0, gsize=2, seq=step, step=step
            )
            s = step * 10 * MS
            rep.range(p, p.pid, s, None if step == 3 else s + MS, registered=msg, domain=1)
    write_sqlite(rep, tmp_path / "hang.sqlite", seed=0)
    res = nsyscomm.load(tmp_path / "hang.sqlite", cache=False)
    assert sorted(res.collectives["step"].tolist()) == [2, 2, 3]
    assert not any(w.startswith("capture window:") for w in res.warnings)
