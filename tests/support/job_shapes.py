"""Generated GPU jobs of a chosen shape, their ground truth known by construction:
one report per node, the wrapper's markers on every rank, a plain training loop whose steps
follow optimizer.step() as the wrapper counts them, and one rank made late by a known amount.

    loop(folder, nodes=2, per_node=2, iterations=8, late_rank=1, late_ns=2_000_000)

writes node0.sqlite, node1.sqlite, ...: iteration i's all-reduces carry step i (the wrapper's
step 0 is before the first optimizer.step()); after the loop one barrier carries step
`iterations` (the teardown's, after the last optimizer.step()). Rank `late_rank` arrives
`late_ns` late at the first all-reduce of every iteration: it is the slow rank, and every other
rank waits for it.

With `all_to_all_bytes` (one size per rank), each iteration starts with an all_to_all in which
rank r sends all_to_all_bytes[r] bytes (uneven split sizes, as MoE token routing sends), and the
late rank is late to it instead of to the first all-reduce."""

from __future__ import annotations

import random
from pathlib import Path

from nsyscomm.synth.ranksim import RankSim, add_rank_marker, finish_collective, xfer
from nsyscomm.synth.report import T0, Report
from nsyscomm.synth.sqlite_writer import write_sqlite

BUCKET = 26214400  # 25.0 MB


def loop(
    folder: Path,
    *,
    nodes: int = 2,
    per_node: int = 2,
    iterations: int = 8,
    late_rank: int | None = 1,
    late_ns: int = 2_000_000,
    world: int | None = None,
    first_rank: int = 0,
    session_offsets_ns: tuple[int, ...] = (),
    names: tuple[str, ...] = (),
    host_prefix: str = "node",
    seed: int = 5,
    all_to_all_bytes: tuple[int, ...] = (),
) -> list[Path]:
    """The job's reports, one per node, in folder. world: the world size the markers declare
    (default: nodes x per_node); first_rank: the rank of the first process (a part of a job)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    world = nodes * per_node if world is None else world
    reps, sims = [], []
    for node in range(nodes):
        off = session_offsets_ns[node] if node < len(session_offsets_ns) else 0
        rep = Report(names[node] if node < len(names) else f"node{node}.sqlite", session_offset_ns=off)
        reps.append(rep)
        for local in range(per_node):
            rank = first_rank + node * per_node + local
            pid = 5000 + 10 * rank
            proc = rep.process(pid, "python3", {pid: "python3"})
            sim = RankSim(rep, proc, rng, rank=rank, device=local, start=T0 + rng.randint(0, 200_000))
            add_rank_marker(rep, sim, rank=rank, local_rank=local, world=world, host=f"{host_prefix}-{node}")
            sims.append(sim)

    def collective(op: str, nbytes: int, step: int, caller: str, late: dict[int, int], sizes=()) -> None:
        pend = [
            s.wrapper_collective(
                s.main,
                op,
                api=op,
                nbytes=sizes[s.rank - first_rank] if sizes else nbytes,
                dtype="float32",
                itemsize=4,
                pg=0,
                gsize=world,
                step=step,
                caller=caller,
                kernel="ncclDevKernel_SendRecv" if op == "all_to_all" else "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                stream=13,
                late_ns=late.get(s.rank, 0),
            )
            for s in sims
        ]
        finish_collective(pend, xfer(max(sizes, default=nbytes), 50.0), rng)
        for s in sims:
            s.sync(s.main)

    for it in range(iterations):
        for s in sims:
            s.advance(s.main, 300_000)
            s.compute(s.main, "ampere_sgemm_128x64_nn", 7, 400_000)
        late = {late_rank: late_ns} if late_rank is not None else {}
        if all_to_all_bytes:
            collective("all_to_all", 0, it, "train.py:29 train_step", late, all_to_all_bytes)
            late = {}
        collective("all_reduce", BUCKET, it, "train.py:30 train_step", late)
        collective("all_reduce", BUCKET, it, "train.py:31 train_step", {})
    collective("barrier", 0, iterations, "train.py:40 main", {})
    paths = []
    for rep in reps:
        write_sqlite(rep, folder / rep.name, seed)
        paths.append(folder / rep.name)
    return paths
