"""Generated CPU jobs with known late arrivals, for tests/test_late.py (ground truth by construction).

Four ranks in one nsys-schema report (nsyscomm.synth's writer), three communicators in a chain:
A = {0, 1}, B = {1, 2}, C = {2, 3}, after a warm-up all_reduce on the world. Rank 0 comes
HOST_DELAY_NS late to A (its CPU busy: with `osrt`, a clock_nanosleep that nsys -t osrt would
record on its thread); rank 1 is then late to B only because A ended late, and rank 2 late to C
because B did: a two-link chain whose root is rank 0.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nsyscomm import nvtx_format, synth

T0 = 1_000_000_000
US = 1_000
HOST_DELAY_NS = 2_000 * US
GAP = 100 * US          # every rank's ordinary time between two calls
XFER = 100 * US         # every collective's transfer once its last rank is in
CALLERS = {"W": "chain.py:10 warmup", "A": "chain.py:20 stage_a", "B": "chain.py:30 stage_b", "C": "chain.py:40 stage_c"}


def write_chain_job(out: Path, *, osrt: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    rep = synth.Report("report.sqlite", cuda=False)
    procs = {}
    for rank in range(4):
        p = rep.process(8000 + rank, "python3", {8000 + rank: "python3"})
        rep.domain_create(p, p.pid, T0, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, T0 + 1000, registered=nvtx_format.format_rank_marker(rank, rank, 4, "h"), domain=1)
        procs[rank] = p
    free = {r: T0 + 10 * US for r in range(4)}   # when each rank's CPU is free for its next call
    seqs: dict[tuple[int, int], int] = {}

    def coll(name: str, pg: int, ranks: tuple[int, ...], late: dict[int, int] | None = None) -> dict[int, int]:
        arrive = {r: free[r] + GAP + (late or {}).get(r, 0) for r in ranks}
        end = max(arrive.values()) + XFER
        for r in ranks:
            seq = seqs.get((r, pg), 0)
            seqs[(r, pg)] = seq + 1
            msg = nvtx_format.format_collective("all_reduce", api="all_reduce", bytes=4096, dtype="float32", numel=1024,
                                                pg=pg, gsize=len(ranks), granks=() if pg == 0 else ranks, seq=seq,
                                                caller=CALLERS[name])
            rep.range(procs[r], procs[r].pid, arrive[r], end, registered=msg, domain=1)
            free[r] = end
        return arrive

    coll("W", 0, (0, 1, 2, 3))
    sleep_start = free[0] + GAP // 2
    coll("A", 1, (0, 1), late={0: HOST_DELAY_NS})
    coll("B", 2, (1, 2))
    coll("C", 3, (2, 3))
    path = out / "report.sqlite"
    synth.write_sqlite(rep, path, seed=5)
    if osrt:
        _add_osrt(path, [(procs[0].pid, sleep_start, sleep_start + HOST_DELAY_NS, "clock_nanosleep")])
    return path


def _add_osrt(path: Path, calls: list[tuple[int, int, int, str]]) -> None:
    """OSRT_API as nsys writes it (its CREATE statement from nsys 2022.4), with names in StringIds."""
    con = sqlite3.connect(path)
    con.execute("""CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
                   globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER,
                   callchainId INTEGER NOT NULL)""")
    next_id = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
    for pid, start, end, name in calls:
        con.execute("INSERT INTO StringIds VALUES (?, ?)", (next_id, name))
        con.execute("INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, 0)",
                    (start, end, synth.global_tid(pid, pid), next_id))
        next_id += 1
    con.commit()
    con.close()
