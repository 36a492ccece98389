"""Point-to-point calls: a message is its send and its receive, never merged across pairs."""

from __future__ import annotations

import nsyscomm
from nsyscomm import nvtx_format
from nsyscomm.synth import Report, write_sqlite


def test_pairs_with_the_same_seq_stay_apart(tmp_path):
    rep = Report("p2p.sqlite", cuda=False)
    procs = [rep.process(100 + r, "python3") for r in range(4)]
    t = 1_000_000
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, t, registered=nvtx_format.format_rank_marker(r, r, 4, "h"), domain=1)
    # 0 -> 1 and 2 -> 3, first message of each pair (seq 0); then 1 -> 0 (seq 1 of pair 0-1)
    plan = [(0, 1, 0, 1000), (2, 3, 0, 5000), (1, 0, 1, 9000)]
    for src, dst, seq, start in plan:
        for rank, op, peer in ((src, "send", dst), (dst, "recv", src)):
            msg = nvtx_format.format_collective(
                op,
                api=op,
                bytes=4096,
                dtype="float32",
                numel=1024,
                pg=0,
                gsize=4,
                seq=seq,
                caller="p2p.py:1 main",
                peer=peer,
            )
            rep.range(procs[rank], procs[rank].pid, t + start, t + start + 500 + rank, registered=msg, domain=1)
    write_sqlite(rep, tmp_path / "p2p.sqlite", seed=0)

    res = nsyscomm.load(tmp_path / "p2p.sqlite")
    c = res.collectives
    assert len(c) == 6
    assert set(zip(c["rank"], c["op"], c["peer"], c["pair"])) == {
        (0, "send", 1, "0-1"),
        (1, "recv", 0, "0-1"),
        (2, "send", 3, "2-3"),
        (3, "recv", 2, "2-3"),
        (1, "send", 0, "0-1"),
        (0, "recv", 1, "0-1"),
    }
    # three messages, each its send and its receive, never merged across pairs
    sides = c.groupby("logical_id").apply(lambda g: tuple(sorted(zip(g["rank"], g["op"]))), include_groups=False)
    assert sorted(sides) == [((0, "recv"), (1, "send")), ((0, "send"), (1, "recv")), ((2, "send"), (3, "recv"))]
    s = res.summary.set_index("op")
    assert s.loc["send", "count"] == 3 and s.loc["recv", "count"] == 3
    assert not any("fewer ranks" in w for w in res.warnings)


def test_peer_field_round_trips():
    msg = nvtx_format.format_collective(
        "send", api="isend", bytes=8, dtype="float32", numel=2, pg="3", gsize=2, seq=5, caller="a|b.py:1 f", peer=7
    )
    assert nvtx_format.parse(msg)["peer"] == "7" and nvtx_format.parse(msg)["caller"] == "a|b.py:1 f"
    tmpl = nvtx_format.collective_template("send", api="isend", dtype="float32", pg="3", gsize=2)
    assert nvtx_format.with_peer(tmpl % (8, 2, 5, "0", "", "a|b.py:1 f"), 7) == msg
