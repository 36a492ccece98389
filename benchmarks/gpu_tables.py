"""The row counts gpu_check.sh prints for an nsys SQLite export: NVTX rows with payloads, the
OS-runtime calls by thread and function, the CUDA activity tables.

    python benchmarks/gpu_tables.py "GLOB"
"""

import glob
import sqlite3
import sys


def one(f):
    c = sqlite3.connect(f)
    tabs = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
    print("##", f, "tables:", len(tabs))
    if "NVTX_EVENTS" in tabs:
        cols = {r[1] for r in c.execute("pragma table_info(NVTX_EVENTS)")}
        b = "count(binaryData)" if "binaryData" in cols else "-1"
        j = "count(jsonText)" if "jsonText" in cols else "-1"
        print("  nvtx rows/blob/json", c.execute(f"select count(*), {b}, {j} from NVTX_EVENTS").fetchone())
    if "OSRT_API" in tabs:
        print("  osrt rows, ns", c.execute("select count(*), sum(end-start) from OSRT_API").fetchone())
        q = """select coalesce(tn.value, o.globalTid & 16777215) th, s.value fn, count(*) n,
               round(sum(o.end-o.start)/1e6, 1) ms, min(o.end-o.start) mn
               from OSRT_API o left join StringIds s on s.id=o.nameId
               left join ThreadNames t on t.globalTid=o.globalTid left join StringIds tn on tn.id=t.nameId
               group by 1,2 order by 3 desc limit 14"""
        for r in c.execute(q):
            print("   ", r)
    for t in (
        "OSRT_CALLCHAINS",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
    ):
        if t in tabs:
            print("  ", t, c.execute(f"select count(*) from {t}").fetchone())


for f in sorted(glob.glob(sys.argv[1] if len(sys.argv) > 1 else "/tmp/runs/*/blobs.sqlite")):
    try:
        one(f)
    except Exception as e:
        print("##", f, "error", e)
