"""What torch.profiler costs a training loop, by what it records (CPU, one process): bare, every
op recorded (NSYSCOMM_TORCH_SCOPES=all), and the user-scope ranges only (nsyscomm's default),
each in a fresh process (a process that has run the profiler once stays slower), interleaved;
the median time per step of each.

    python benchmarks/torch_profiler_cost.py --steps 200 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("bare", "all", "user")


def one(variant: str, steps: int, port: int) -> float:
    """The loop's ms per step in this process, under one variant."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    os.environ["NSYSCOMM_TRACE_DIR"] = tempfile.mkdtemp(prefix="nsyscomm-profcost-")
    import torch
    import torch.distributed as dist

    from nsyscomm.capture import torch_profile

    dist.init_process_group("gloo")
    # one intra-op thread: on 2 busy cores OpenMP's spinning threads made steps 40 times slower
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    x = torch.randn(64, 256)
    small = torch.ones(8)

    def loop(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            model(x).square().mean().backward()
            # a range like the wrapper's around a collective's work (no real collective: gloo's
            # one-rank all_reduce time varies tenfold on a busy machine and hides the profiler)
            with torch.profiler.record_function("nsyscomm:bench"):
                small.add_(1)
        return (time.perf_counter() - t0) / n * 1e3

    loop(10)  # warm-up
    if variant != "bare":
        os.environ["NSYSCOMM_TORCH_SCOPES"] = variant
        torch_profile.configure()
        torch_profile.start(0)
    ms = loop(steps)
    torch_profile.finish()
    dist.destroy_process_group()
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--one", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=29561, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(one(a.one, a.steps, a.port))
        return
    res: dict[str, list[float]] = {v: [] for v in VARIANTS}
    port = a.port
    for _ in range(a.repeats):
        for v in VARIANTS:
            port += 1
            cmd = [sys.executable, __file__, "--one", v, "--steps", str(a.steps), "--port", str(port)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res[v].append(float(out.strip().splitlines()[-1]))
    base = statistics.median(res["bare"])
    names = {"bare": "bare", "all": "all ops", "user": "user scope"}
    for v, t in res.items():
        m = statistics.median(t)
        print(f"{names[v]:>11}: {m:7.3f} ms per step  x{m / base:5.2f}   ({', '.join(f'{x:.3f}' for x in t)})")


if __name__ == "__main__":
    main()
