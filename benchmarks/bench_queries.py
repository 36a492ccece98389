"""The job's queries one by one: each SQL file of this checkout against a baseline's version of it,
on one job database, alternated, best of N, and whether they give the same rows.

    python benchmarks/bench_queries.py REPORT.sqlite --baseline DIR [--runs 3] [--queries collectives ranks]

The job's database is this checkout's (nsyscomm.load of the report, extract cache as usual);
both versions of each query run over it as CREATE TABLE ... AS (so that no time goes into
handing rows to Python), in the same process, seconds apart: the ratio holds on a loaded machine
where whole runs drift. collectives.sql is not among them: the job lets go of the calls it reads
once the collectives table is made (combine/calls.py), so it is timed whole by bench_combine.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import baseline  # benchmarks/baseline.py, beside this script

import nsyscomm
from nsyscomm import duck
from nsyscomm.analyses.late import NOISE_NS

QUERIES = {  # name -> parameters
    "logical_collectives": None,
    "late_arrivals": {"noise_ns": NOISE_NS},
    "ranks": None,
    "steady_ranks": {"warmup": ""},
    "dimensions": None,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--baseline", required=True, help="another checkout of nsyscomm: its sql/ folder")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--queries", nargs="*", default=list(QUERIES))
    a = ap.parse_args(argv)
    con = nsyscomm.load(a.report).con
    print(f"report {a.report}, best of {a.runs}, load average {os.getloadavg()[0]:.1f}")
    for name in a.queries:
        params = QUERIES.get(name)
        texts = {"baseline": (Path(a.baseline) / "sql" / f"{name}.sql").read_text(), "this": duck.sql(name)}
        best = {k: float("inf") for k in texts}
        for i in range(a.runs):
            for k in baseline.in_turn(i, texts):
                t0 = time.perf_counter()
                con.execute(f"CREATE OR REPLACE TEMP TABLE got_{k} AS {texts[k]}", params)
                best[k] = min(best[k], time.perf_counter() - t0)
        differ = duck.scalar(
            con,
            "SELECT count(*) FROM ((SELECT * FROM got_baseline EXCEPT ALL SELECT * FROM got_this) "
            "UNION ALL (SELECT * FROM got_this EXCEPT ALL SELECT * FROM got_baseline))",
        )
        rows = duck.scalar(con, "SELECT count(*) FROM got_this")
        print(
            f"{name:20s} baseline {best['baseline']:.3f} s, this {best['this']:.3f} s: "
            f"x{best['this'] / best['baseline']:.2f}; {rows} rows, {'the same' if not differ else f'{differ} differ'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
