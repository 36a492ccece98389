"""`nsyscomm summarize` over many per-rank reports: time linear in their count, memory bounded.

    python benchmarks/bench_many_reports.py [--counts 128 256 512 1024] [--jobs N]
    python benchmarks/bench_many_reports.py --counts 32 --calls-per-report 60000 --memory-limit 500MB
    python benchmarks/bench_many_reports.py --counts 256 --baseline DIR [--runs 3]
    python benchmarks/bench_many_reports.py --counts 1024 --dask [--jobs N] [--runs 3]

Generates N per-rank reports (benchmarks/gen_large_report.py --per-rank; by default small ones,
2 steps x 4 layers x 10 kernels each; with --calls-per-report, 10 steps of layers of 4 kernels,
half of them NCCL) in a temporary folder and times summarize on them in a fresh process, without
the cache and then with it warm. Prints seconds and ms per report for each N, and the peak RSS
of the process that combines the reports (its workers each hold one report at a time).

--baseline DIR [DIR...]: other checkouts of nsyscomm (their C extensions built in place) run the
same summarizes, alternating with this one's (the order reverses every run) --runs times; prints
each one's median and its ratio to the first baseline's, the figure to quote on a shared, busy
machine.

--dask: the same summarizes on a Dask cluster started here (distributed.LocalCluster: as many
worker processes of one thread as the local pool has workers, --jobs or the usable cores),
given to summarize as --dask ADDRESS, alternating with the local pool's (the order reverses every
run) --runs times; prints each one's median, their ratio, and whether the two JSON summaries are
identical. The cluster's workers start before the runs, as a cluster a user points --dask at has.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import baseline  # noqa: E402 - benchmarks/baseline.py, beside this script


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument(
        "--calls-per-report",
        type=int,
        default=None,
        help="collective calls per report (a multiple of 20; default: small reports of 16)",
    )
    ap.add_argument("--memory-limit", help="passed to summarize: DuckDB's memory per process (it spills past it)")
    ap.add_argument(
        "--baseline",
        type=Path,
        nargs="+",
        help="other checkouts of nsyscomm, run in the same alternation (ratios: to the first)",
    )
    ap.add_argument("--runs", type=int, default=3, help="with --baseline: runs of each checkout per count")
    ap.add_argument("--dask", action="store_true", help="a local Dask cluster against the local pool, alternated")
    a = ap.parse_args(argv)
    gen, bench = _load("gen_large_report"), _load("bench_summarize")
    shape = dict(steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2)
    if a.calls_per_report:  # 2 NCCL kernels in a layer of 4, 10 steps
        shape = dict(steps=10, layers=max(1, a.calls_per_report // 20), kernels_per_layer=4, nccl_share=0.5)
    tmp = Path(tempfile.mkdtemp(prefix="nsyscomm-many-"))
    env = dict(os.environ, NSYSCOMM_CACHE_DIR=str(tmp / "cache"))
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    if a.baseline:
        return _against_baseline(a, gen, bench, shape, tmp, env)
    if a.dask:
        try:
            return _against_dask(a, gen, bench, shape, tmp, env)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # its reports and JSON: nothing left in /tmp
    for n in a.counts:
        folder = tmp / f"n{n}"
        info = gen.generate(folder, ranks=n, per_rank=True, quiet=True, **shape)
        extra = [
            *(["--jobs", str(a.jobs)] if a.jobs else []),
            *(["--memory-limit", a.memory_limit] if a.memory_limit else []),
        ]
        cold, rss, _ = bench.run(str(folder), "--no-cache", *extra, env=env)
        bench.run(str(folder), *extra, env=env)  # fill the cache
        hit, _, _ = bench.run(str(folder), *extra, env=env)
        calls = info["ranks"] * info["collectives_per_rank"]
        print(
            f"{n:5d} reports ({info['rows']:,} rows, {calls:,} calls): no cache {cold:.1f} s "
            f"({1000 * cold / n:.1f} ms/report), peak RSS of the combining process {rss:.0f} MB; "
            f"cache hit {hit:.1f} s ({1000 * hit / n:.1f} ms/report)",
            flush=True,
        )
    return 0


def _against_baseline(a, gen, bench, shape, tmp: Path, env: dict) -> int:
    # the runs compile nothing: with PYTHONDONTWRITEBYTECODE set (this project's sandbox) every
    # summarize would compile the modules changed since the last run that wrote them
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"this": HERE.parent}
    for k, d in enumerate(a.baseline):
        trees[f"baseline{k or ''}"] = d.resolve()
    envs = {}
    for name, root in trees.items():
        compileall.compile_dir(str(root / "nsyscomm"), quiet=1)
        envs[name] = dict(env, PYTHONPATH=str(root), NSYSCOMM_CACHE_DIR=str(tmp / f"cache-{name}"))
        if name != "this":
            baseline.check(root, envs[name])  # its own code and SQL, not this checkout's
    extra = [
        *(["--jobs", str(a.jobs)] if a.jobs else []),
        *(["--memory-limit", a.memory_limit] if a.memory_limit else []),
    ]
    for n in a.counts:
        folder = tmp / f"n{n}"
        gen.generate(folder, ranks=n, per_rank=True, quiet=True, **shape)
        cold: dict = {k: [] for k in trees}
        hit: dict = {k: [] for k in trees}
        for r in range(a.runs):
            for name in list(trees)[:: 1 if r % 2 == 0 else -1]:
                cold[name].append(bench.run(str(folder), "--no-cache", *extra, env=envs[name])[0])
                bench.run(str(folder), *extra, env=envs[name])  # fill the cache
                hit[name].append(bench.run(str(folder), *extra, env=envs[name])[0])
        for what, times in (("no cache", cold), ("cache hit", hit)):
            med = {k: statistics.median(v) for k, v in times.items()}
            runs = "; ".join(f"{k} " + " ".join(f"{x:.1f}" for x in v) for k, v in times.items())
            ratios = ", ".join(f"{k} {med[k] / med['baseline']:.3f}" for k in trees if k != "baseline")
            print(
                f"{n:5d} reports, {what}: medians "
                + ", ".join(f"{k} {med[k]:.1f} s" for k in trees)
                + f"; ratio to the baseline: {ratios} (runs: {runs})",
                flush=True,
            )
    return 0


def _summarize_to(out: Path, folder: Path, extra: list[str], env: dict) -> float:
    """Seconds of one `nsyscomm summarize --format json` of folder in a fresh process, its JSON in out."""
    code = "import sys; from nsyscomm.cli import entry; entry(sys.argv[1:])"
    t0 = time.perf_counter()
    with open(out, "w") as f:
        subprocess.run(
            [sys.executable, "-c", code, "summarize", str(folder), "--format", "json", *extra],
            stdout=f,
            env=env,
            check=True,
            cwd=baseline.RUN_DIR,
        )
    return time.perf_counter() - t0


def _against_dask(a, gen, bench, shape, tmp: Path, env: dict) -> int:
    from distributed import LocalCluster

    jobs = a.jobs or len(os.sched_getaffinity(0))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as in _against_baseline: the runs compile nothing
    compileall.compile_dir(str(HERE.parent / "nsyscomm"), quiet=1)
    with LocalCluster(
        n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        variants = {"pool": ["--jobs", str(jobs)], "dask": ["--dask", cluster.scheduler_address]}
        for n in a.counts:
            folder = tmp / f"n{n}"
            gen.generate(folder, ranks=n, per_rank=True, quiet=True, **shape)
            walls: dict = {k: [] for k in variants}
            docs: dict = {}
            for r in range(a.runs):
                for name in list(variants)[:: 1 if r % 2 == 0 else -1]:
                    out = tmp / f"{name}-{n}.json"
                    walls[name].append(_summarize_to(out, folder, ["--no-cache", *variants[name]], env))
                    docs[name] = out.read_text()
            med = {k: statistics.median(v) for k, v in walls.items()}
            runs = "; ".join(f"{k} " + " ".join(f"{x:.1f}" for x in v) for k, v in walls.items())
            print(
                f"{n:5d} reports, no cache, {jobs} workers: local pool {med['pool']:.1f} s "
                f"({1000 * med['pool'] / n:.1f} ms/report), Dask LocalCluster {med['dask']:.1f} s "
                f"({1000 * med['dask'] / n:.1f} ms/report): dask / pool x{med['dask'] / med['pool']:.2f}; "
                f"JSON {'identical' if docs['pool'] == docs['dask'] else 'DIFFERENT'} (runs: {runs}; "
                f"load average {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
