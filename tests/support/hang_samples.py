"""Generated jobs with known hangs and desyncs, for tests/analyses/test_hang.py (ground truth by construction).

A job is 4 CPU ranks in one nsys-schema report (written by nsyscomm.synth's writer) and,
optionally, the flight records the wrapper would have left (written by
nsyscomm.capture.flight_record's own ring writer). Each rank's calls are a list of
(op, bytes, dtype, caller, finished), call i of them at time i, with seq i on the default group;
or (op, bytes, dtype, caller, finished, pg, granks): on process group pg of the global ranks
granks, seq counted on that group.
"""

from __future__ import annotations

import os
from pathlib import Path

from nsyscomm import nvtx_format, synth
from nsyscomm.capture import flight_record as fr

WORLD = 4
T0 = 1_000_000_000
STEP = 1_000_000


def _message(op, nbytes, dtype, seq, caller, gsize=WORLD, granks=(), pg=0):
    return nvtx_format.format_collective(
        op,
        api=op,
        bytes=nbytes,
        dtype=dtype,
        numel=nbytes // 4,
        pg=pg,
        gsize=gsize,
        granks=granks,
        seq=seq,
        caller=caller,
    )


def write_job(
    out: Path,
    calls: dict[int, list[tuple]],
    *,
    records: bool,
    dead_pid: int = 2**22 - 7,
    states: dict[int, int] | None = None,
) -> Path:
    """Write report.sqlite (+ records/rank<R>.ring) into out; return the report's path.
    An unfinished call is in the report with its range closed at the process's end (what nsys
    does with a range left open), and unfinished in the record. states: rank -> header state
    (flight_record.RUNNING / EXITED / RAISED / STOPPED); a RUNNING record's pid is dead_pid
    (no such process), so it reads as aborted."""
    out.mkdir(parents=True, exist_ok=True)
    rep = synth.Report("report.sqlite", cuda=False)
    for rank, cs in calls.items():
        p = rep.process(9000 + rank, "python3", {9000 + rank: "python3"})
        rep.domain_create(p, p.pid, T0, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, T0 + 1000, registered=nvtx_format.format_rank_marker(rank, rank, WORLD, "h"), domain=1)
        for i, (message, finished) in enumerate(_messages(cs)):
            start = T0 + (i + 1) * STEP + rank * 1000
            end = start + (STEP // 2 if finished else 20 * STEP)
            rep.range(p, p.pid, start, end, registered=message, domain=1)
    synth.write_sqlite(rep, out / "report.sqlite", seed=7)
    if records:
        rdir = out / "records"
        rdir.mkdir(exist_ok=True)
        for rank, cs in calls.items():
            state = (states or {}).get(rank, fr.EXITED)
            mm = fr.open_ring(
                rdir / f"rank{rank}.ring", rank=rank, pid=dead_pid if state == fr.RUNNING else os.getpid()
            )
            push, pop, _raising = fr._py_chain(lambda m: None, lambda: None, mm)
            for message, finished in _messages(cs):
                push(message)
                if finished:
                    pop()
            if state != fr.RUNNING:
                fr.set_state(mm, state, "RuntimeError: boom" if state == fr.RAISED else "")
            mm.close()
    return out / "report.sqlite"


def _messages(cs: list[tuple]) -> list[tuple[str, bool]]:
    """Each call's wrapper message and whether it finished; seq counted per process group."""
    seqs: dict[int, int] = {}
    out = []
    for op, nbytes, dtype, caller, finished, *where in cs:
        pg, granks = where if where else (0, ())
        seq = seqs.get(pg, 0)
        seqs[pg] = seq + 1
        message = _message(op, nbytes, dtype, seq, caller, len(granks) or WORLD, granks, pg)
        out.append((message, finished))
    return out


def ok_calls(n: int = 4, caller: str = "train.py:10 step") -> list[tuple]:
    return [("all_reduce", 4096, "float32", caller, True) for _ in range(n)]
