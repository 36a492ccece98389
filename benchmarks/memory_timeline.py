"""Peak memory of one `nsyscomm summarize REPORT --format json --no-cache` in-process, overall and
after the extraction: the stages after it (combine, analyses, JSON) apart from the extraction's
own peak, which is often higher.

    python benchmarks/memory_timeline.py REPORT.sqlite [--out TIMELINE.txt] [summarize options]

Samples the process's resident memory (VmRSS) every 0.1 s on a thread of its own, with the
nsyscomm function each other thread is in; the extraction ends when `extract_many` returns.
Prints the peaks (MB), overall, of the extraction and after it, and where they came; --out writes the timeline, a line a sample.
Run it with another checkout's interpreter (its nsyscomm importable) for the figures before.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
import traceback


def _rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def _where() -> str:
    """The innermost nsyscomm function of each thread but this one."""
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        ours = [f for f in traceback.extract_stack(frame) if f"{os.sep}nsyscomm{os.sep}" in f.filename]
        if ours:
            out.append(f"{os.path.basename(ours[-1].filename)}:{ours[-1].name}")
    return " | ".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--out", help="write the timeline here")
    a, rest = ap.parse_known_args(argv)
    samples: list[tuple[float, int, str]] = []
    done: list[float] = []  # when the extraction returned
    t0 = time.perf_counter()

    def sample() -> None:
        while True:
            time.sleep(0.1)
            samples.append((time.perf_counter() - t0, _rss_mb(), _where()))

    threading.Thread(target=sample, daemon=True).start()
    from nsyscomm.cli import entry  # the command, without the program's quick exit
    from nsyscomm.extract import pool

    extract_many = pool.extract_many

    def timed(*args, **kw):
        try:
            return extract_many(*args, **kw)
        finally:
            done.append(time.perf_counter() - t0)

    pool.extract_many = timed
    sys.argv = ["nsyscomm", "summarize", a.report, "--format", "json", "--no-cache", *rest]
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.suppress(SystemExit):
        entry()
    time.sleep(0.15)  # a last sample
    rows = list(samples)
    if a.out:
        with open(a.out, "w") as f:
            f.writelines(f"{t:7.2f} {mb:6d} {where}\n" for t, mb, where in rows)
    peak = max(rows, key=lambda r: r[1])
    print(f"{a.report}: peak RSS {peak[1]} MB at {peak[0]:.1f} s ({peak[2] or '-'})")
    during = [r for r in rows if done and r[0] <= done[0]]
    if during:
        top = max(during, key=lambda r: r[1])
        print(f"the extraction (to {done[0]:.1f} s): peak {top[1]} MB at {top[0]:.1f} s ({top[2] or '-'})")
    after = [r for r in rows if done and r[0] > done[0]]
    if after:
        top = max(after, key=lambda r: r[1])
        print(
            f"after the extraction ({done[0]:.1f} s, {after[0][1]} MB): peak {top[1]} MB at {top[0]:.1f} s "
            f"({top[2] or '-'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
