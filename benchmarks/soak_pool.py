"""Soak of the extraction pool: loads in a process whose own threads keep DuckDB and
numpy busy, and the CLI on a folder, each bounded in time. Counts the loops run and the hangs.

    python benchmarks/soak_pool.py [--loops 40] [--cli-runs 10] [--reports 3] [--timeout 60]
    python benchmarks/soak_pool.py --baseline DIR    # the same, run with another checkout's code

One loop, in one process (a child of this script): load(jobs=1, cache=False), load(jobs=2,
cache=False), load(jobs=2) into an empty cache and load(jobs=2) from it, of a folder of small
per-rank reports (gen_large_report.py), while a thread runs DuckDB queries and another numpy
matrix products without pause. A loop that has not ended within --timeout seconds is a hang:
the child and everything it started (its process group) is killed and a new child goes on.
Then ``nsyscomm summarize FOLDER --jobs 2`` --cli-runs times, with and without the cache, each
bounded the same way. tests/extract/test_pool_soak.py runs a few loops of it in CI.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(folder: str, loops: int, cache_dir: str) -> None:
    """The loops, printing 'loop N' as each ends (run as: soak_pool.py --child ...)."""
    import duckdb
    import numpy as np

    import nsyscomm

    stop = threading.Event()

    def queries() -> None:
        con = duckdb.connect()
        while not stop.is_set():
            con.execute("SELECT sum(i * i) FROM range(200000) t(i)").fetchall()

    def matmuls() -> None:
        a = np.random.default_rng(0).random((300, 300))
        while not stop.is_set():
            a = a @ a
            a /= np.abs(a).max() or 1.0

    for fn in (queries, matmuls):
        threading.Thread(target=fn, daemon=True).start()
    os.environ["NSYSCOMM_CACHE_DIR"] = cache_dir
    for i in range(loops):
        calls = set()
        for jobs, cache in ((1, False), (2, False), (2, True), (2, True)):
            calls.add(len(nsyscomm.load(folder, jobs=jobs, cache=cache).collectives))
        if len(calls) != 1:
            raise SystemExit(f"loop {i}: the loads disagree: {calls}")
        import shutil

        shutil.rmtree(cache_dir, ignore_errors=True)
        print(f"loop {i}", flush=True)
    stop.set()


def _forward(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def soak_loads(folder: Path, loops: int, timeout: float, env: dict) -> tuple[int, int]:
    """(loops that ended, hangs): children run loops until ``loops`` have ended or been hung."""
    done = hangs = 0
    cache_dir = tempfile.mkdtemp(prefix="nsyscomm-soak-cache-")
    while done + hangs < loops:
        p = subprocess.Popen(
            [sys.executable, __file__, "--child", str(folder), str(loops - done - hangs), cache_dir],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: a hang is killed with all it started
            cwd=tempfile.gettempdir(),  # not a checkout: `python FILE` puts FILE's folder first on sys.path only
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_forward, args=(p.stdout, lines), daemon=True).start()
        try:
            while done + hangs < loops:
                line = lines.get(timeout=timeout)
                if not line.startswith("loop "):
                    raise SystemExit(f"soak child said {line!r}")
                done += 1
        except queue.Empty:
            if p.poll() is not None:
                raise SystemExit(f"the soak child failed (exit status {p.returncode})") from None
            hangs += 1
        finally:
            _kill_group(p)
    return done, hangs


def soak_cli(folder: Path, runs: int, timeout: float, env: dict) -> tuple[int, int]:
    """(runs that ended with status 0, hangs) of summarize FOLDER --jobs 2, cache on and off."""
    ok = hangs = 0
    env = dict(env, NSYSCOMM_CACHE_DIR=tempfile.mkdtemp(prefix="nsyscomm-soak-cli-"))
    for i in range(runs):
        cmd = [sys.executable, "-m", "nsyscomm.cli", "summarize", str(folder), "--jobs", "2", "--format", "json"]
        p = subprocess.Popen(
            cmd + (["--no-cache"] if i % 2 else []),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            cwd=tempfile.gettempdir(),
        )
        try:
            _, err = p.communicate(timeout=timeout)
            if p.returncode:
                raise SystemExit(f"summarize failed (status {p.returncode}): {err.strip()[-300:]}")
            ok += 1
        except subprocess.TimeoutExpired:
            hangs += 1
        finally:
            _kill_group(p)
    return ok, hangs


def make_folder(out: Path, reports: int) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_large_report", HERE / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(out, ranks=reports, steps=2, layers=4, kernels_per_layer=10, nccl_share=0.2, per_rank=True, quiet=True)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]), argv[3])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--loops", type=int, default=40)
    ap.add_argument("--cli-runs", type=int, default=10)
    ap.add_argument("--reports", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a loop or a run may take before it is a hang")
    ap.add_argument("--baseline", type=Path, help="another checkout of nsyscomm: run its code instead")
    a = ap.parse_args(argv)
    root = (a.baseline or HERE.parent).resolve()
    env = dict(os.environ, PYTHONPATH=str(root))
    if a.baseline:
        sys.path.insert(0, str(HERE))
        import baseline

        baseline.check(a.baseline, env)
    folder = make_folder(Path(tempfile.mkdtemp(prefix="nsyscomm-soak-")) / "reports", a.reports)
    print(f"code {root}; load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores", flush=True)
    t = time.perf_counter()
    done, hangs = soak_loads(folder, a.loops, a.timeout, env)
    print(f"loads: {done} loops ended, {hangs} hung ({time.perf_counter() - t:.0f} s)", flush=True)
    t = time.perf_counter()
    ok, cli_hangs = soak_cli(folder, a.cli_runs, a.timeout, env)
    print(f"cli: {ok} runs ended, {cli_hangs} hung ({time.perf_counter() - t:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
