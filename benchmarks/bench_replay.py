"""Time the what-if replay on a generated large job (no report files: the calls table the
replay reads, built directly).

    python benchmarks/bench_replay.py [--ranks 1000] [--steps 10] [--analyse]

Each step of the job: 4 all-reduces in tensor-parallel groups of 8 consecutive ranks, 2
all-gathers in data-parallel groups (ranks equal mod 8), 1 all-reduce of all ranks; compute
between calls drawn at random, a few late ranks. Prints the graph's size and the seconds to
build it, to replay it as measured and without stragglers, and (--analyse) the whole what-if
analysis (every scenario, per-key and per-rank replays).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from nsyscomm.analyses import replay, whatif


def job(ranks: int, steps: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    clock = np.zeros(ranks)
    r = np.arange(ranks)
    pattern = (
        [("all_reduce", r // 8, 2_000_000, "tp")] * 4
        + [("all_gather", r % 8, 64_000_000, "dp")] * 2
        + [("all_reduce", np.zeros(ranks, np.int64), 4_000, "world")]
    )
    rows = []
    seq = 0
    for step in range(steps):
        for op, grp, nbytes, name in pattern:
            compute = rng.gamma(4.0, 0.25, ranks) * 1e6  # ns, about 1 ms
            late = rng.random(ranks) < 0.002
            compute[late] += 5e6
            arrive = clock + compute
            last = pd.Series(arrive).groupby(grp).transform("max").to_numpy()
            end = last + 50_000 + nbytes / 100.0
            ids = seq * 1_000_000 + grp
            rows.append(
                pd.DataFrame(
                    {
                        "rank": r,
                        "step": step,
                        "op": op,
                        "bytes": nbytes,
                        "caller": f"model.py {name}",
                        "group_size": 1,
                        "sync_id": ids,
                        "start_ns": arrive.astype(np.int64),
                        "end_ns": end.astype(np.int64),
                        "exposed_ns": (end - arrive) * 0.5,
                    }
                )
            )
            clock = end
            seq += 1
    df = pd.concat(rows, ignore_index=True)
    return df.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--analyse", action="store_true", help="also time the whole what-if analysis")
    a = ap.parse_args()
    ops = job(a.ranks, a.steps)
    t0 = time.perf_counter()
    m = whatif.from_ops(ops)
    t1 = time.perf_counter()
    start, end = replay.replay(m.graph, m.dur, m.delay)
    t2 = time.perf_counter()
    replay.replay(m.graph, m.dur, m.delay, reduce="min")
    t3 = time.perf_counter()
    err = np.abs(end - ops["end_ns"].to_numpy(float) / 1e6).max()
    print(f"{a.ranks} ranks, {len(ops)} calls, {m.graph.n_groups} collectives, {m.graph.levels} levels")
    print(f"build graph    {t1 - t0:7.3f} s")
    print(f"replay (as measured, max error {err:.1e} ms) {t2 - t1:7.3f} s")
    print(f"replay (no straggler) {t3 - t2:7.3f} s")
    if a.analyse:
        t4 = time.perf_counter()
        out = whatif.analyse(m)
        t5 = time.perf_counter()
        n = sum(1 for _ in out["attribution"])
        print(f"whole analysis ({len(out['what_if'])} scenarios, {n} attribution rows) {t5 - t4:7.3f} s")


if __name__ == "__main__":
    main()
