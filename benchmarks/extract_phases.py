"""Where one nsys SQLite report's extraction spends its time and memory, phase by phase.

    python benchmarks/extract_phases.py REPORT.sqlite

Runs the steps of nsyscomm.ingest.nsys.extract one after the other on the main thread (the
command runs the gap kernels on a second thread, beside the busy times), and
prints per phase its wall time, the resident memory after it and the peak within it (VmHWM,
reset before each phase through /proc/self/clear_refs; Linux only). The calls phase is
sql/calls_nsys.sql into Arrow, a part of the report at a time (nsyscomm.ingest.nsys.calls); then
the report's rows are dropped and their memory handed back; the busy phase (the islands made a
process at a time as it reads them) and the gaps phase are nsyscomm.ingest.busy and
nsyscomm.ingest.nsys.gap_kernels on the C scan's compute kernels.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path


def _memory() -> dict[str, int]:
    """VmRSS and VmHWM of this process, MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    return out


class _Phases:
    def __init__(self) -> None:
        self.t = time.perf_counter()

    def mark(self, name: str) -> None:
        m, t = _memory(), time.perf_counter()
        print(f"{name:14s} {t - self.t:6.2f} s  RSS {m['VmRSS']:6d} MB  peak {m['VmHWM']:6d} MB")
        self.t = t
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak from here on


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report")
    a = ap.parse_args(argv)
    p = _Phases()
    from nsyscomm import duck
    from nsyscomm.ingest import busy, compute_columns
    from nsyscomm.ingest.nsys import calls as nsys_calls
    from nsyscomm.ingest.nsys import extract, gap_kernels, reader

    p.mark("imports")
    opened = reader.open_report(Path(a.report))
    con = opened.con
    if opened.compute is None:
        raise SystemExit(f"{a.report}: not read by the C scan (not built, or the kernels do not fit in memory)")
    p.mark("scan")
    extract._process_spans(con)
    extract._nccl_kernel_names(con, opened)
    read = threading.Event()
    read.set()
    extract._nccl_kernels(con, read, [], "report")
    con.execute("DROP TABLE src_kernels")  # as the extraction does on the C scan's route
    p.mark("nccl_kernels")
    extract._own_launches(con)
    p.mark("launch owners")
    calls = nsys_calls.calls(con)
    p.mark("calls")
    done: Future = Future()
    done.set_result(None)
    extract._drop_rows(con, done)
    p.mark("drop rows")
    calls = busy.busy_at_edges(calls, busy.islands_by_process(opened.compute))
    p.mark("busy")
    gaps = gap_kernels.top_in_gaps(calls, opened.compute, duck.threads(con))
    p.mark("gaps")
    n = compute_columns.count(opened.compute)
    print(f"{calls.num_rows:,} calls, {n:,} compute kernels, {len(gaps):,} gap rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
