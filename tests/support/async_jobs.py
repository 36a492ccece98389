"""Generated gloo-style jobs whose asynchronous collectives overlap compute, with their truth by
construction: the program is simulated here (not by nsyscomm), once with a straggler's sleep and
once without it, and the report of the first is written with the wrapper's NVTX messages (each
call's enqueue range, its completion mark on the backend's thread, the caller's wait range).

Each step on each rank: sleep (the straggler only, at its step), issue `calls` asynchronous
broadcasts on one process group back to back (ISSUE_MS each; gloo's two worker threads run them
in the order enqueued: a call starts once its issue is done and all but one of the calls before
it have ended, and a collective's transfer ends TRANSFER_MS after its last rank started it),
compute COMPUTE_MS (the backward the calls overlap), wait for each call in turn (a wait returns
WAIT_MS after the later of its start and the call's end), compute OPTIMIZER_MS. The program's
step period without the sleep is a step's figure with no straggler; removing the sleep must give
back exactly that.
"""

from __future__ import annotations

from pathlib import Path

from nsyscomm import nvtx_format as fmt
from nsyscomm.synth import Report, write_sqlite

MS = 1_000_000
T0 = 1_000 * MS
ISSUE_MS, TRANSFER_MS, COMPUTE_MS, WAIT_MS, OPTIMIZER_MS = 0.1, 5.0, 20.0, 0.01, 3.0
BYTES = 1 << 20


def simulate(steps: int, calls: int, late: dict[int, tuple[int, float]] | None = None) -> list[list[dict]]:
    """Per step, per call: each rank's issue, execution and wait (ms from the job's start).
    late: step -> (rank, sleep ms) before that step's first issue."""
    late = late or {}
    clock = [0.0, 0.0]
    ended: list[float] = []  # the ends of the group's calls so far
    out = []
    for step in range(steps):
        sleeper, sleep = late.get(step, (-1, 0.0))
        issue = [[clock[r] + (sleep if r == sleeper else 0.0) + i * ISSUE_MS for i in range(calls)] for r in (0, 1)]
        start = [[0.0] * calls for _ in (0, 1)]
        end = [0.0] * calls
        for i in range(calls):
            ahead = sorted(ended)
            free = ahead[-2] if len(ahead) >= 2 else 0.0  # two workers: all but one ended
            for r in (0, 1):
                start[r][i] = max(issue[r][i], free)
            end[i] = max(start[0][i], start[1][i]) + TRANSFER_MS
            ended.append(end[i])
        rows = [dict(issue=issue[r][i], start=start[r][i], end=end[i]) for i in range(calls) for r in (0, 1)]
        for r in (0, 1):
            t = issue[r][-1] + ISSUE_MS + COMPUTE_MS
            for i in range(calls):
                row = rows[2 * i + r]
                row["wait"] = (t, max(t, end[i]) + WAIT_MS)
                t = row["wait"][1]
            clock[r] = t + OPTIMIZER_MS
        out.append(rows)
    return out


def step_periods(sim: list[list[dict]]) -> list[float]:
    """Each step's time as nsyscomm's what-if times it: from the previous step's last end (on any
    rank) to its own; the first step from its first call's start."""
    ends = [max(c["end"] for c in rows) for rows in sim]
    first = min(c["start"] for c in sim[0])
    return [ends[0] - first] + [b - a for a, b in zip(ends, ends[1:])]


def gloo_ranks(rep: Report) -> list:
    """The two ranks: one python process each with a gloo worker thread (tid pid + 1), each with
    the wrapper's rank marker."""
    procs = [rep.process(100 + 10 * r, "python3", {100 + 10 * r: "python3", 101 + 10 * r: "gloo"}) for r in (0, 1)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, T0 - MS, registered=fmt.format_rank_marker(r, r, 2, "h"), domain=1)
    return procs


def enqueue(
    rep: Report,
    proc,
    op: str,
    seq: int,
    start: int,
    end: int,
    *,
    nbytes: int,
    step: int,
    caller: str,
    async_op: bool = True,
) -> None:
    """The wrapper's range over a call's enqueue on group 0 of 2 ranks (times in ns)."""
    msg = fmt.format_collective(
        op,
        api=op,
        bytes=nbytes,
        dtype="float32",
        numel=nbytes // 4,
        pg=0,
        gsize=2,
        seq=seq,
        async_op=async_op,
        step=step,
        caller=caller,
    )
    rep.range(proc, proc.pid, start, end, registered=msg, domain=1)


def done(rep: Report, proc, t: int, op: str, seq: int) -> None:
    """A call's completion mark, on the backend's thread (tid pid + 1), as the wrapper's future
    callback emits it."""
    rep.mark(proc, proc.pid + 1, t, registered=fmt.format_done(fmt.format_ident(op, 0, seq)), domain=1)


def wait(rep: Report, proc, start: int, end: int, op: str, seq: int) -> None:
    """The caller's wait for a call (Work.wait), on its own thread."""
    rep.range(proc, proc.pid, start, end, registered=fmt.format_wait(fmt.format_ident(op, 0, seq)), domain=1)


def write(path: Path, sim: list[list[dict]]) -> Path:
    """The report of a simulated job, one process per rank (the calls' completion marks on a
    second thread, as the wrapper's future callbacks emit them)."""
    rep = Report(path.name, cuda=False)
    procs = gloo_ranks(rep)
    ns = lambda ms: T0 + round(ms * MS)  # noqa: E731
    seq = 0
    for step, rows in enumerate(sim):
        for i in range(len(rows) // 2):
            for r, p in enumerate(procs):
                c = rows[2 * i + r]
                enqueue(
                    rep,
                    p,
                    "broadcast",
                    seq,
                    ns(c["issue"]),
                    ns(c["issue"] + ISSUE_MS),
                    nbytes=BYTES,
                    step=step,
                    caller="zero.py:40 step",
                )
                done(rep, p, ns(c["end"]), "broadcast", seq)
                wait(rep, p, ns(c["wait"][0]), ns(c["wait"][1]), "broadcast", seq)
            seq += 1
    write_sqlite(rep, path, seed=0)
    return path
