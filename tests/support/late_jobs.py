"""Generated CPU jobs with known late arrivals, for tests/analyses/test_late.py (ground truth by construction).

Four ranks in one nsys-schema report (nsyscomm.synth's writer), three communicators in a chain:
A = {0, 1}, B = {1, 2}, C = {2, 3}, after a warm-up all_reduce on the world. Rank 0 comes
HOST_DELAY_NS late to A (its CPU busy: with `osrt`, a clock_nanosleep that nsys -t osrt would
record on its thread); rank 1 is then late to B only because A ended late, and rank 2 late to C
because B did: a two-link chain whose root is rank 0. With `ranges`, the program's own NVTX
ranges on every rank: a "train_step" around all four calls (it encloses every gap: never a cause)
and, on rank 0, a "load_batch" range around the host delay (data loading, by its own account).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nsyscomm import nvtx_format, synth

T0 = 1_000_000_000
US = 1_000
HOST_DELAY_NS = 2_000 * US
GAP = 100 * US  # every rank's ordinary time between two calls
XFER = 100 * US  # every collective's transfer once its last rank is in
CALLERS = {
    "W": "chain.py:10 warmup",
    "A": "chain.py:20 stage_a",
    "B": "chain.py:30 stage_b",
    "C": "chain.py:40 stage_c",
}


LOAD_RANGE = "load_batch"


def _cpu_ranks(rep: synth.Report, n: int, pid0: int) -> dict:
    """n CPU processes, one per rank, each with nsyscomm's NVTX domain and its rank marker."""
    procs = {}
    for rank in range(n):
        p = rep.process(pid0 + rank, "python3", {pid0 + rank: "python3"})
        rep.domain_create(p, p.pid, T0, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, T0 + 1000, registered=nvtx_format.format_rank_marker(rank, rank, n, "h"), domain=1)
        procs[rank] = p
    return procs


def _all_reduce(pg: int, ranks: tuple[int, ...], seq: int, caller: str) -> str:
    """The wrapper's message of a 4 KiB float32 all_reduce on group pg (0: the world)."""
    return nvtx_format.format_collective(
        "all_reduce",
        api="all_reduce",
        bytes=4096,
        dtype="float32",
        numel=1024,
        pg=pg,
        gsize=len(ranks),
        granks=() if pg == 0 else ranks,
        seq=seq,
        caller=caller,
    )


def write_chain_job(out: Path, *, osrt: bool, ranges: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    rep = synth.Report("report.sqlite", cuda=False)
    procs = _cpu_ranks(rep, 4, 8000)
    free = {r: T0 + 10 * US for r in range(4)}  # when each rank's CPU is free for its next call
    seqs: dict[tuple[int, int], int] = {}

    def coll(name: str, pg: int, ranks: tuple[int, ...], late: dict[int, int] | None = None) -> dict[int, int]:
        arrive = {r: free[r] + GAP + (late or {}).get(r, 0) for r in ranks}
        end = max(arrive.values()) + XFER
        for r in ranks:
            seq = seqs.get((r, pg), 0)
            seqs[(r, pg)] = seq + 1
            msg = _all_reduce(pg, ranks, seq, CALLERS[name])
            rep.range(procs[r], procs[r].pid, arrive[r], end, registered=msg, domain=1)
            free[r] = end
        return arrive

    coll("W", 0, (0, 1, 2, 3))
    sleep_start = free[0] + GAP // 2
    coll("A", 1, (0, 1), late={0: HOST_DELAY_NS})
    coll("B", 2, (1, 2))
    coll("C", 3, (2, 3))
    if ranges:
        for p in procs.values():
            rep.range(p, p.pid, T0 + 5 * US, max(free.values()) + GAP, text="train_step")
        p0 = procs[0]
        rep.range(p0, p0.pid, sleep_start, sleep_start + HOST_DELAY_NS, text=LOAD_RANGE)
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
        con.execute(
            "INSERT INTO OSRT_API VALUES (?, ?, 27, ?, ?, 0, 0, 0)", (start, end, synth.global_tid(pid, pid), next_id)
        )
        next_id += 1
    con.commit()
    con.close()


SLOW_KERNEL_NS = 2_000 * US  # how much longer rank 1's compute kernel runs before each all_reduce
SLOW_KERNEL = "ampere_sgemm_128x64_nn"
EVEN_KERNEL = "vectorized_elementwise_kernel"


def write_slow_kernel_job(out: Path, steps: int = 4) -> Path:
    """Two GPU ranks; in each step two compute kernels (EVEN_KERNEL as long on both, SLOW_KERNEL
    SLOW_KERNEL_NS longer on rank 1) then an all_reduce launched right after it on the CPU and queued behind it on the device: rank 1's
    launch is on time, its NCCL kernel starts late because its compute ran longer."""
    import random

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    rep = synth.Report("report.sqlite")
    sims = []
    for rank in range(2):
        proc = rep.process(6100 + rank, "python3", {6100 + rank: "python3"})
        sim = synth.RankSim(rep, proc, rng, rank=rank, device=rank, start=T0)
        synth.add_rank_marker(rep, sim, rank=rank, local_rank=rank, world=2, host="gpu-host")
        sims.append(sim)
    # a warm-up all_reduce, on time: every later call has a previous one to measure its gap from
    pend = [
        s.wrapper_collective(
            s.main,
            "broadcast",
            api="broadcast",
            nbytes=1 << 16,
            dtype="float32",
            itemsize=4,
            pg=0,
            gsize=2,
            caller="gpu_train.py:40 main",
            kernel="ncclDevKernel_Broadcast_RING_LL",
            stream=13,
        )
        for s in sims
    ]
    synth.finish_collective(pend, 50 * US, rng)
    for s in sims:
        s.sync(s.main)
    for step in range(steps):
        pend = []
        for s in sims:
            s.cpu[s.main] = max(x.cpu[x.main] for x in sims)  # both CPUs in step
            s.compute(s.main, EVEN_KERNEL, 7, 300 * US)  # as long on both ranks (but for jitter)
            s.compute(
                s.main,
                SLOW_KERNEL,
                7,
                1_000 * US + (SLOW_KERNEL_NS if s.rank == 1 else 0),
                record=f"k{step}",
            )
            pend.append(
                s.wrapper_collective(
                    s.main,
                    "all_reduce",
                    api="all_reduce",
                    nbytes=1 << 20,
                    dtype="float32",
                    itemsize=4,
                    pg=0,
                    gsize=2,
                    step=step,
                    caller="gpu_train.py:50 train_step",
                    kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                    stream=13,
                    wait=(f"k{step}",),
                )
            )
        synth.finish_collective(pend, 50 * US, rng, record=f"ar{step}")
        for s in sims:
            s.sync(s.main)
    path = out / "report.sqlite"
    synth.write_sqlite(rep, path, seed=11)
    return path


def write_tied_delays_job(out: Path, calls: int = 3000) -> Path:
    """Two ranks, three communicators over both, `calls` all-reduces in turn: rank 1 arrives
    exactly HOST_DELAY_NS late to every one (equal delays: the order of the late arrivals must
    come from the collectives, group then seq, not from how the database sorted its ties)."""
    out.mkdir(parents=True, exist_ok=True)
    rep = synth.Report("report.sqlite", cuda=False)
    procs = _cpu_ranks(rep, 2, 8100)
    t = T0 + 10 * US
    # first, both on time on a fourth communicator: the ranks' first collective, whose skew would
    # be their start-up (no late rank is named there)
    for r in (0, 1):
        rep.range(
            procs[r],
            procs[r].pid,
            t + GAP,
            t + GAP + XFER,
            registered=_all_reduce(3, (0, 1), 0, CALLERS["W"]),
            domain=1,
        )
    t += GAP + XFER
    for i in range(calls):
        pg = i % 3
        for r in (0, 1):
            msg = _all_reduce(pg, (0, 1), i // 3, CALLERS["A"])
            arrive = t + GAP + (HOST_DELAY_NS if r == 1 else 0)
            rep.range(procs[r], procs[r].pid, arrive, t + GAP + HOST_DELAY_NS + XFER, registered=msg, domain=1)
        t += GAP + HOST_DELAY_NS + XFER
    path = out / "report.sqlite"
    synth.write_sqlite(rep, path, seed=7)
    return path


HAIR_NS = 2_000 * US  # rank 1's lateness: often, a little
SLEEP_NS = 10_000 * US  # rank 2's lateness: as often, much more


def write_hair_and_sleep_job(out: Path, calls: int = 10) -> Path:
    """Four ranks, `calls` all-reduces on the world after one where all meet on time: rank 1 comes
    HAIR_NS late to every other one and rank 2 SLEEP_NS late to the rest. Each is last equally
    often (a tie on the count, which the smaller rank would win); rank 2 keeps the three others
    waiting 3 x SLEEP_NS per call, rank 1 3 x HAIR_NS: rank 2 is the straggler."""
    out.mkdir(parents=True, exist_ok=True)
    rep = synth.Report("report.sqlite", cuda=False)
    procs = _cpu_ranks(rep, 4, 8200)
    t = T0 + 10 * US
    for i in range(calls + 1):
        late = {} if i == 0 else ({1: HAIR_NS} if i % 2 else {2: SLEEP_NS})
        arrive = {r: t + GAP + late.get(r, 0) for r in range(4)}
        end = max(arrive.values()) + XFER
        for r in range(4):
            msg = _all_reduce(0, (0, 1, 2, 3), i, CALLERS["A"])
            rep.range(procs[r], procs[r].pid, arrive[r], end, registered=msg, domain=1)
        t = end
    path = out / "report.sqlite"
    synth.write_sqlite(rep, path, seed=11)
    return path
