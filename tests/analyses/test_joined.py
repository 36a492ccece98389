"""Ranks that joined early under torch.distributed.algorithms.Join, on generated reports whose
truth is known by construction: the joined rank's shadow collectives are named with its step,
its absence is no one's lateness, and no what-if saves it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import nsyscomm
from nsyscomm import nvtx_format
from nsyscomm.analyses.contract import document
from nsyscomm.synth import Report, write_sqlite
from nsyscomm.views import set_aside
from tests.conftest import DATA, DONE_ENV, done_ranks, job_did_its_work, run_job

MS = 1_000_000
COMPUTE = 30 * MS  # each rank's compute before a step's first all_reduce
STEPS, JOINS_AT = 6, 3


def _job(tmp_path, mark_join: bool = True):
    """Two ranks; each step: COMPUTE, then two all_reduces of 1 ms once both ranks are there.
    Rank 1 runs out of inputs after step 2 (its step counter stays at 3) and shadows rank 0's
    steps 3-5: it issues each call right after its previous one ended, and waits for rank 0."""
    rep = Report("join.sqlite", cuda=False)
    procs = [rep.process(100 + r, "python3") for r in range(2)]
    t0 = 10 * MS
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, t0, registered=nvtx_format.format_rank_marker(r, r, 2, "h"), domain=1)
    ends = {0: t0, 1: t0}
    joined_from = None
    for step in range(STEPS):
        for i in range(2):
            seq = 2 * step + i
            # rank 1 a hair (20 us) after rank 0 while both train: the last to arrive, never late
            arrive = {r: ends[r] + (COMPUTE if i == 0 else 100_000) + 20_000 * r for r in (0, 1)}
            if step >= JOINS_AT:
                arrive[1] = ends[1] + 100_000  # a shadow: no compute of its own
                joined_from = joined_from or ends[1] + 50_000
            end = max(arrive.values()) + MS
            for r, p in enumerate(procs):
                msg = nvtx_format.format_collective(
                    "all_reduce",
                    api="all_reduce",
                    bytes=4096,
                    dtype="float32",
                    numel=1024,
                    pg=0,
                    gsize=2,
                    seq=seq,
                    step=min(step, JOINS_AT) if r == 1 else step,
                    caller="join.py:9 main",
                )
                rep.range(p, p.pid, arrive[r], end, registered=msg, domain=1)
                ends[r] = end
    if mark_join:
        rep.range(
            procs[1],
            procs[1].pid,
            joined_from,
            ends[1] + 10_000,
            registered=nvtx_format.format_joined(JOINS_AT),
            domain=1,
        )
    write_sqlite(rep, tmp_path / "join.sqlite", seed=0)
    return nsyscomm.load(tmp_path / "join.sqlite", cache=False)


def test_the_joined_rank_is_named_with_its_step(tmp_path):
    res = _job(tmp_path)
    (row,) = res.joined.to_dict("records")
    assert (row["rank"], row["step"], row["shadow_calls"], row["first_step"], row["last_step"]) == (1, 3, 6, 3, 5)
    c = res.collectives
    shadows = c[c["joined"].notna()]
    assert set(shadows["rank"]) == {1} and set(shadows["joined"]) == {JOINS_AT}
    # each shadow takes the step of rank 0's call it matches
    assert sorted(shadows["step"].tolist()) == [3, 3, 4, 4, 5, 5]
    assert (c.groupby("step").size() == 4).all()
    doc = document(res)
    assert doc["joined"]["ranks"][0]["step"] == JOINS_AT
    (line,) = [x for x in set_aside.lines(res) if x.startswith("joined:")]
    assert line.startswith("joined: rank 1 ran out of inputs and joined at step 3 (torch.distributed.algorithms.Join)")


def test_the_absence_is_no_lateness_and_no_saving(tmp_path):
    res = _job(tmp_path)
    # rank 0 kept computing while rank 1 waited in its shadows: nobody was late
    assert res.late.empty, res.late
    steps = res.steps.set_index("step")
    assert not steps.loc[JOINS_AT:, "late_ms"].fillna(0).gt(0).any(), steps
    assert steps.loc[: JOINS_AT - 1, "late_ms"].max() < 0.1  # rank 1's 20 us while both trained
    doc = document(res)
    # the skew counts the steps both ranks trained in (rank 1 last by its 20 us), not the shadows
    assert [(r["rank"], r["late_count"]) for r in doc["skew"]["per_rank"]] == [(0, 0), (1, 5)], doc["skew"]
    assert doc["skew"]["instances"] == 5
    for w in doc["diagnosis"]["what_if"]:
        for st in w["steps"][1:]:
            # no step faster than the compute it holds (step 0's time starts at its first call)
            assert st["step_ms_after"] >= COMPUTE / 1e6, (w["scenario"], st)
        if w["scenario"] == "no_straggler":
            # only rank 1's 20 us while both trained; nothing in the shadow steps
            assert [st["saved_ms"] for st in w["steps"][JOINS_AT:]] == pytest.approx(
                [0.0] * (STEPS - JOINS_AT), abs=1e-9
            )
            assert w["total_saved_ms"] < 0.2, w


def test_without_the_join_range_the_absence_reads_as_lateness(tmp_path):
    """What the shadows looked like before: rank 0 named late at every shadow step."""
    res = _job(tmp_path, mark_join=False)
    assert res.joined.empty
    late = res.late
    assert set(late["rank"]) == {0} and len(late) >= JOINS_AT


@pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None,
    reason="nsys and torchrun are needed for the real run",
)
def test_real_join_job_names_the_joined_rank_and_counts_no_lateness(tmp_path):
    """tests/data/join_job.py (DDP + ZeroRedundancyOptimizer under Join, rank 1 given 4 fewer
    batches) under `nsyscomm run`: rank 1 is named as joined at the step the program printed, and
    nothing of its shadows counts: no late arrival, no per-step lateness in the steps only rank 0
    trained, and the what-if keeps the waiting there."""
    env = dict(os.environ, **{DONE_ENV: str(tmp_path)})
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    r = run_job(tmp_path / "out", DATA / "join_job.py", options=("--format", "json"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(tmp_path), 2), r.stderr[-3000:]
    joined_at = {rank: int((tmp_path / f"joined.{rank}").read_text()) for rank in (0, 1)}
    assert joined_at == {0: 8, 1: 4}
    doc = json.loads(r.stdout)
    (row,) = doc["joined"]["ranks"]
    assert (row["rank"], row["step"], row["first_step"]) == (1, joined_at[1], joined_at[1])
    res = nsyscomm.load(r.out, cache=False)
    shadows = set(
        res.con.execute(
            'SELECT DISTINCT "group", seq FROM collectives WHERE logical_id IN '
            "(SELECT logical_id FROM logical_collectives WHERE shadow)"
        ).fetchall()
    )
    assert len(shadows) >= 4 * (joined_at[0] - joined_at[1])  # Join's count, DDP's buckets, ZeRO's broadcasts
    assert not [x for x in res.late.itertuples() if (x.group, x.seq) in shadows], res.late
    only_rank_0 = range(joined_at[1] + 1, joined_at[0])  # steps where rank 1 did nothing but shadow
    steps = res.steps.set_index("step")
    assert set(only_rank_0) <= set(steps.index), steps
    assert not steps.loc[list(only_rank_0), "late_ms"].fillna(0).gt(0).any(), steps
    # the what-if keeps the waiting in the shadows (its replay of the steps themselves is the
    # what-if's own model: tests/analyses/test_joined.py's generated jobs check the saving)
    assert any("shadow collectives of a rank that joined early" in n for n in doc["diagnosis"]["what_if_notes"])
