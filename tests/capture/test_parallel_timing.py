"""FSDP2, DTensor tensor parallel and sequence parallel on a real 2-rank gloo job under `nsyscomm
run` (tests/data/parallel_job.py), checked against figures nsyscomm does not make: torch's own
CommDebugMode counts of each phase's collectives, the program's timing of synchronous calls of
the same sizes (an asynchronous call cannot be faster than the wire) and the period between its
optimizer steps. The job is profiled once.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics

import pytest

from tests.conftest import DATA, DONE_ENV, done_ranks, job_did_its_work, run_job

SCRIPT = DATA / "parallel_job.py"
MS = 1_000_000
PHASES = ("sync", "fsdp", "tp", "sp")  # between the job's barriers, in order
STEPS = 5  # parallel_job.STEPS
WIDTH, TOKENS, BATCH, SEQ = 1024, 1024, 4, 256  # parallel_job's sizes
FSDP_LAYER = 4 * (WIDTH * WIDTH + WIDTH)  # bytes of one FSDP2 unit's parameters, gathered whole
ACTIVATION = 4 * TOKENS * WIDTH  # TP's all_reduce, SP's reduce-scatter (BATCH * SEQ = TOKENS)

# CommDebugMode's op names (c10d's and the functional collectives') as nsyscomm's ops
TORCH_OP = {
    "_allgather_base_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "allreduce_": "all_reduce",
    "all_reduce": "all_reduce",
    "scatter_": "scatter",
    "broadcast_": "broadcast",
}

pytestmark = [
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH"),
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH"),
]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job run once: nsyscomm's JSON document (None when it printed none), its Result, and
    each rank's own figures."""
    pytest.importorskip("torch")
    import nsyscomm

    base = tmp_path_factory.mktemp("parallel")
    figures, done = base / "figures", base / "done"
    figures.mkdir()
    done.mkdir()
    env = dict(os.environ, PARALLEL_JOB_OUT=str(figures), **{DONE_ENV: str(done)})
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    r = run_job(base / "out", SCRIPT, options=("--format", "json"), env=env)
    assert done_ranks(done) == 2, r.stderr[-3000:]
    own = {json.loads(f.read_text())["rank"]: json.loads(f.read_text()) for f in figures.glob("rank*.json")}
    assert sorted(own) == [0, 1]
    doc = json.loads(r.stdout[r.stdout.index("{") :]) if "{" in r.stdout else None
    res = nsyscomm.load([r.out], cache=False)
    return doc, res, own, r


def _phases(res, rank):
    """A rank's calls in call order, split at its barriers: {phase: frame}, and its barriers."""
    c = res.collectives
    c = c[c["rank"] == rank].sort_values("cpu_start").reset_index(drop=True)
    at = list(c.index[c["op"] == "barrier"])
    parts = [c.iloc[a + 1 : b] for a, b in zip(at, at[1:], strict=False)]
    assert c.index[0] == at[0], "a call before the job's first barrier"
    return dict(zip(PHASES, parts, strict=False)), len(at)


def test_the_job_ran_and_its_summary_keeps_its_invariants(job):
    from nsyscomm.analyses.invariants import violations

    doc, res, _, r = job
    assert job_did_its_work(r.returncode, r.stderr, 2, 2), r.stderr[-3000:]
    assert doc is not None and violations(doc) == [], r.stderr[-3000:]
    c = res.collectives
    assert (c["exec_end"] >= c["exec_start"]).all() and (c["exec_start"] >= c["cpu_start"]).all()
    span = c["exec_end"].max() - c["cpu_start"].min()
    assert (c["duration_ns"] >= 0).all() and (c["duration_ns"] <= span).all()
    assert not any("could not be paired" in w for w in res.warnings), res.warnings


def test_each_phase_has_the_collectives_torch_counted(job):
    """Per rank and phase, nsyscomm's calls per op are exactly CommDebugMode's count (FSDP2's
    all-gathers and reduce-scatters, DTensor's parameter scatters and broadcasts, its
    all_reduce, all-gathers and reduce-scatters), and the sync phase's the program made."""
    _, res, own, _ = job
    for rank in (0, 1):
        phases, barriers = _phases(res, rank)
        assert barriers == own[rank]["barriers"]
        for phase in PHASES:
            want: dict = {}
            counted = own[rank]["sync_counts"] if phase == "sync" else own[rank]["comm_counts"][phase]
            for op, n in counted.items():
                want[TORCH_OP.get(op, op)] = want.get(TORCH_OP.get(op, op), 0) + n
            got = phases[phase]["op"].value_counts().to_dict()
            assert got == want, (rank, phase, got, counted)


def _sync_ms(own, op, nbytes):
    """The program's own fastest synchronous call of that op and size on either rank, in ms."""
    return min(min(own[r]["sync_ns"][f"{op}:{nbytes}"]) for r in (0, 1)) / MS


def _asynchronous(res, rank):
    """The rank's large asynchronous calls by phase, as the program made them: each FSDP2 step's
    first two calls (its own unshard(async_op=True) of both layers), DTensor's all_reduces of TP's
    activation, SP's reduce-scatters back to sequence shards (AsyncCollectiveTensors)."""
    phases, _ = _phases(res, rank)
    fsdp = phases["fsdp"].reset_index(drop=True)  # FSDP2 shards its parameters locally: no setup calls
    per_step = len(fsdp) // STEPS
    prefetch = fsdp[fsdp.index % per_step < 2]
    tp, sp = phases["tp"], phases["sp"]
    return {
        ("fsdp", "all_gather", FSDP_LAYER): prefetch,
        ("tp", "all_reduce", ACTIVATION): tp[(tp["op"] == "all_reduce") & (tp["bytes"] == ACTIVATION)],
        ("sp", "reduce_scatter", ACTIVATION): sp[(sp["op"] == "reduce_scatter") & (sp["bytes"] == ACTIVATION)],
    }


def test_asynchronous_calls_take_the_wire_time_not_their_enqueue(job):
    """Each phase's large asynchronous calls: their execution (exec_start..exec_end) is at least
    a quarter of the program's fastest synchronous call of the op and size (the synchronous
    repeats ran at another moment of a shared machine), and clearly longer than their enqueue
    (the call's host range), which it would equal if timed by the enqueue."""
    _, res, own, _ = job
    for rank in (0, 1):
        for (phase, op, nbytes), calls in _asynchronous(res, rank).items():
            assert len(calls) == 2 * STEPS, (rank, phase, calls[["op", "bytes", "api"]])
            assert (calls["op"] == op).all() and (calls["bytes"] == nbytes).all(), (rank, phase, calls)
            took = statistics.median(calls["duration_ns"]) / MS
            enqueue = statistics.median(calls["cpu_end"] - calls["cpu_start"]) / MS
            sync = _sync_ms(own, op, nbytes)
            assert took >= 0.25 * sync, (rank, phase, took, sync, enqueue)
            assert took >= 1.5 * enqueue, (rank, phase, took, enqueue)
            assert (calls["exec_end"] >= calls["cpu_end"]).all(), (rank, phase)


def test_step_durations_agree_with_the_programs_step_periods(job):
    """nsyscomm's steps are the optimizer's: step g holds the calls between its g-th and
    (g+1)-th step, and lasts from step g-1's last call's end to its own. Within a phase each
    iteration repeats the same work, so over a phase's steps after its first, nsyscomm's step
    durations add up to the periods between the optimizer steps the program timed itself (on
    each side, a step's end shifts by the time from its last call to the optimizer's return)."""
    from nsyscomm import duck

    _, res, own, _ = job
    spans = duck.frame(res.con.execute(duck.sql("step_spans"))).set_index("step")
    n = len(own[0]["step_end_ns"])
    assert n == 3 * STEPS and list(spans.index) == list(range(n + 1)), spans
    capture = res.collectives["exec_end"].max() - res.collectives["cpu_start"].min()
    assert (spans["step_ns"] > 0).all() and (spans["step_ns"] <= capture).all(), spans
    phase = own[0]["step_phase"]
    for name in ("fsdp", "tp", "sp"):
        steps = [g for g in range(1, n) if phase[g] == phase[g - 1] == name]
        assert len(steps) == STEPS - 1
        theirs = sum(spans.loc[g, "step_ns"] for g in steps) / MS
        periods = [sum(own[r]["step_end_ns"][g] - own[r]["step_end_ns"][g - 1] for g in steps) / MS for r in (0, 1)]
        ours = statistics.mean(periods)
        assert abs(theirs - ours) <= 0.2 * ours + 30, (name, theirs, periods)
