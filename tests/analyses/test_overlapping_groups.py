"""A rank's delay is counted once across communicators. Generated 3-rank host-timed job (gloo's
shape: each call's host range is its execution), times in ms from T0:

- every rank: a world barrier at 1.0-2.0 (the ranks' first meeting, no skew);
- ranks 0 and 1, on their group [0, 1]: an all_reduce rank 0 enters at 3.0 and rank 1 at 103.0
  (its own 100 ms of work), both leave at 104.0; a second one at 105.0-106.0;
- a world barrier rank 2 (not in the group) enters at 3.0, rank 0 at 107.0 and rank 1 at 107.5,
  all leave at 108.0.

Rank 1 is last at the barrier by 104.5 ms, but 100 ms of that is the delay it was already named
late for at the group's all_reduce: it is late by 100 ms there and by 4.5 ms here (its time since
it last arrived), 104.5 ms in all, not 204.5 ms (longer than it ran)."""

from __future__ import annotations

import pytest

from nsyscomm import api, nvtx_format, synth
from nsyscomm.analyses import contract, invariants

T0 = 1_000_000_000
MS = 1_000_000
WORLD = (0, 1, 2)
GROUP = (0, 1)
# (rank, op, pg, members, enter ms, leave ms)
CALLS = [
    *[(r, "barrier", 0, WORLD, 1.0, 2.0) for r in WORLD],
    (0, "all_reduce", 1, GROUP, 3.0, 104.0),
    (1, "all_reduce", 1, GROUP, 103.0, 104.0),
    *[(r, "all_reduce", 1, GROUP, 105.0, 106.0) for r in GROUP],
    (2, "barrier", 0, WORLD, 3.0, 108.0),
    (0, "barrier", 0, WORLD, 107.0, 108.0),
    (1, "barrier", 0, WORLD, 107.5, 108.0),
]


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("overlap")
    rep = synth.Report("report.sqlite", cuda=False)
    procs = {}
    for r in WORLD:
        p = procs[r] = rep.process(9000 + r, "python3", {9000 + r: "python3"})
        rep.domain_create(p, p.pid, T0, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, T0 + 1000, registered=nvtx_format.format_rank_marker(r, r, len(WORLD), "h"), domain=1)
    seqs: dict[tuple[int, int], int] = {}
    for r, op, pg, members, enter, leave in CALLS:
        seq = seqs.get((r, pg), 0)
        seqs[(r, pg)] = seq + 1
        message = nvtx_format.format_collective(
            op,
            api=op,
            bytes=0 if op == "barrier" else 4096,
            dtype="float32",
            numel=0 if op == "barrier" else 1024,
            pg=pg,
            gsize=len(members),
            granks=() if pg == 0 else members,
            seq=seq,
            caller="train.py:10 step",
        )
        p = procs[r]
        rep.range(p, p.pid, T0 + int(enter * MS), T0 + int(leave * MS), registered=message, domain=1)
    synth.write_sqlite(rep, out / "report.sqlite", seed=7)
    return contract.document(api.load([out / "report.sqlite"], cache=False))


def test_a_delay_held_over_to_another_communicator_is_counted_once(doc):
    late = {(t["group"], t["seq"]): t["late_ms"] for t in doc["top_skew"] if t["last_rank"] == 1}
    assert late[("1", 0)] == pytest.approx(100.0, abs=1e-6)
    assert late[("0", 1)] == pytest.approx(4.5, abs=1e-6)
    ranks = doc["diagnosis"]["late_ranks"]
    assert ranks[0]["rank"] == 1 and ranks[0]["delay_ms"] == pytest.approx(104.5, abs=1e-6)


def test_every_view_keeps_the_late_rank(doc):
    assert invariants.violations(doc) == []
    assert doc["withheld"] == []
    assert doc["skew"]["straggler_rank"] == 1
