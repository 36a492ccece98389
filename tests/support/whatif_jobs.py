"""Generated CPU jobs with exactly known timelines, for the what-if replay's tests.

A job is a list of steps; a step is a list of events run in order: ("compute", rank, ms) moves
that rank's clock; ("coll", ranks, transfer_ms, pg) is one collective of those ranks: it starts
when its last rank arrives and ends transfer_ms later on all of them; ("async", ranks, transfer_ms,
pg) the same collective issued asynchronously and timed as its enqueue on each rank but the last
to arrive (its range ends 0.01 ms after it starts, the rank's clock moves on from there), the last
rank's call ending as a "coll" would; ("p2p", src, dst, transfer_ms, pg) one message: a buffered
send from src's clock to transfer_ms later, a receive from dst's clock to transfer_ms after the
later of the two starts (it waits for its send). The reports are written
with nsyscomm.synth's public pieces (a gloo-style CPU report: the nsyscomm wrapper's NVTX
ranges, no kernels), one process per rank; every rank's clock starts at synth.T0. The tests state
the what-if truth of each job by hand from these events.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from nsyscomm import nvtx_format, synth

MS = 1_000_000  # ns
BYTES = 4_000_000
CALLER = "job.py:10 train_step"


def _msg(op: str, pg, ranks, seq: int, step: int, peer: int | None = None) -> str:
    return nvtx_format.format_collective(
        op,
        api=op,
        bytes=BYTES,
        dtype="float32",
        numel=BYTES // 4,
        pg=pg,
        gsize=len(ranks),
        granks=tuple(ranks),
        seq=seq,
        step=step,
        caller=CALLER,
        **({"peer": peer} if peer is not None else {}),
    )


def write_job(
    path: Path,
    n_ranks: int,
    steps: list[list[tuple]],
    start_ms: dict[int, float] | None = None,
    first_step: int = 1,
) -> dict:
    """Write the job's report to path; returns each call's (rank, step, pg, start_ns, end_ns).
    start_ms: when a rank's process starts after synth.T0 and reaches the loop (its start-up: its
    first event, the wrapper's rank marker, comes that much later too). first_step: the first
    step's number (the wrapper's count starts at 0; a capture window's first step is later).
    ("compute", rank, ms, name) computes inside the program's own NVTX range of that name."""
    rep = synth.Report(Path(path).name, cuda=False)
    procs = [rep.process(8000 + r, "python3", {8000 + r: "python3"}) for r in range(n_ranks)]
    clock = {}
    for r, p in enumerate(procs):
        t = synth.T0 - 100_000 + round((start_ms or {}).get(r, 0) * MS)
        rep.domain_create(p, p.pid, t, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, t + 1000, registered=nvtx_format.format_rank_marker(r, r, n_ranks, "cpu-host"), domain=1)
        clock[r] = synth.T0 + round((start_ms or {}).get(r, 0) * MS)
    seq = defaultdict(int)
    calls = []
    for step, events in enumerate(steps, start=first_step):
        for ev in events:
            if ev[0] == "compute":
                r, ms = ev[1], ev[2]
                if len(ev) > 3:  # the program's own range around it (a checkpoint load, a batch)
                    rep.range(procs[r], procs[r].pid, clock[r], clock[r] + round(ms * MS), text=ev[3])
                clock[r] += round(ms * MS)
                continue
            if ev[0] == "p2p":
                _, src, dst, transfer_ms, pg = ev
                pair = (pg, min(src, dst), max(src, dst))
                ends = {
                    src: clock[src] + round(transfer_ms * MS),
                    dst: max(clock[src], clock[dst]) + round(transfer_ms * MS),
                }
                for r, op, peer in ((src, "send", dst), (dst, "recv", src)):
                    s = seq[(r, pair)]  # the wrapper's seq: both directions of a pair, per rank
                    seq[(r, pair)] += 1
                    rep.range(
                        procs[r],
                        procs[r].pid,
                        clock[r],
                        ends[r],
                        registered=_msg(op, pg, (src, dst), s, step, peer),
                        domain=1,
                    )
                    calls.append((r, step, pg, clock[r], ends[r]))
                    clock[r] = ends[r]
                continue
            kind, ranks, transfer_ms, pg = ev
            last = max(ranks, key=lambda r: (clock[r], -r))
            end = clock[last] + round(transfer_ms * MS)
            for r in ranks:
                s = seq[(r, pg)]
                seq[(r, pg)] += 1
                e = end if kind == "coll" or r == last else clock[r] + MS // 100
                rep.range(
                    procs[r], procs[r].pid, clock[r], e, registered=_msg("all_reduce", pg, ranks, s, step), domain=1
                )
                calls.append((r, step, pg, clock[r], e))
                clock[r] = e
    synth.write_sqlite(rep, Path(path), seed=7)
    return {"calls": calls}
