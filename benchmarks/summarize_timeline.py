"""Where one `nsyscomm summarize` spends its wall time, and on how many cores: the entries and
exits of its main stages, each thread's, beside the process's CPU use sampled every 0.05 s.

    python benchmarks/summarize_timeline.py REPORT.sqlite [--format json] [--interval 0.05]

A stretch after the read where "cores" stays near 1 on a 2-core machine is one the other core
could share (docs/performance.md, "Three stretches on one core"). The stages are timed by
wrapping a fixed list of functions, not by a profile hook, which would slow every Python call:
a function this list names that a later version renamed is reported and skipped. Run it with
the report in the page cache (a summarize just before, or bench_summarize.py's warm()).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import threading
import time

# (module, attribute): where each stage is looked up when it is called
STAGES = [
    ("nsyscomm.ingest.nsys.reader", "open_report"),
    ("nsyscomm.ingest.nsys.reader", "_scan"),
    ("nsyscomm.ingest.nsys.extract", "_extract"),
    ("nsyscomm.ingest.nsys.extract", "_nccl_kernels"),
    ("nsyscomm.ingest.nsys.extract", "_own_launches"),
    ("nsyscomm.ingest.nsys.calls", "calls"),
    ("nsyscomm.ingest.nsys.extract", "_report_reads"),
    ("nsyscomm.ingest.nsys.extract", "_drop_rows"),
    ("nsyscomm.ingest.nsys.extract", "islands_by_process"),
    ("nsyscomm.ingest.nsys.extract", "busy_at_edges"),
    ("nsyscomm.ingest.nsys.gap_kernels", "top_in_gaps"),
    ("nsyscomm.ingest.nsys.gap_kernels", "names_of"),
    ("nsyscomm.api", "combine"),
    ("nsyscomm.combine.job", "create_collectives"),
    ("nsyscomm.combine.calls", "register_soon"),
    ("nsyscomm.cli", "emit"),
    ("nsyscomm.analyses.hang", "diagnose"),
    ("nsyscomm.analyses.late", "late_arrivals"),
    ("nsyscomm.analyses.dimensions", "dimensions"),
    ("nsyscomm.analyses.whatif_result", "of_result"),
    ("nsyscomm.views.json_out", "document"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report")
    ap.add_argument("--format", default="text", choices=["text", "json"])
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between CPU samples")
    a = ap.parse_args()

    t0 = time.perf_counter()
    events: list[tuple[float, str, str]] = []  # (s since start, thread, what)

    def timed(name: str, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            who = threading.current_thread().name
            events.append((time.perf_counter() - t0, who, f"{name} begins"))
            try:
                return fn(*args, **kwargs)
            finally:
                events.append((time.perf_counter() - t0, who, f"{name} ends"))

        return run

    for mod, attr in STAGES:
        m = importlib.import_module(mod)
        if not hasattr(m, attr):
            print(f"# {mod}.{attr} not found: not timed", file=sys.stderr)
            continue
        setattr(m, attr, timed(attr, getattr(m, attr)))

    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(a.interval):
            cpu = os.times()
            samples.append((time.perf_counter() - t0, cpu.user + cpu.system))

    threading.Thread(target=sample, daemon=True).start()
    from nsyscomm.cli import main as cli

    start = time.perf_counter() - t0
    out = open(os.devnull, "w")
    stdout, sys.stdout = sys.stdout, out
    try:
        cli(["summarize", "--no-cache", "--format", a.format, a.report], standalone_mode=False)
    except SystemExit:
        pass
    finally:
        sys.stdout = stdout
        out.close()
        done.set()
    end = time.perf_counter() - t0

    print(f"summarize of {a.report} ({a.format}): {end - start:.2f} s (the imports of the stages' modules before it)")
    cpu_at = dict(samples)
    rows = sorted(events + [(t, "", "") for t in cpu_at])
    prev = (start, samples[0][1] if samples else 0.0)
    cores: list[str] = []
    for t, who, what in rows:
        if not who:  # a CPU sample: cores used since the previous one
            cpu = cpu_at[t]
            cores.append(f"{(cpu - prev[1]) / max(t - prev[0], 1e-9):.1f}")
            prev = (t, cpu)
            continue
        if cores:
            print(f"{'':8} cores: {' '.join(cores)}")
            cores = []
        print(f"{t:7.3f}s {who[:24]:24} {what}")
    if cores:
        print(f"{'':8} cores: {' '.join(cores)}")


if __name__ == "__main__":
    main()
