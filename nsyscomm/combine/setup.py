"""What a job's statistics set aside (docs/architecture.md, "Setup calls and warm-up steps"):
the calls that set up their communicator (``collectives.setup``, sql/setup_calls.sql) and the
collectives that are their ranks' first (``logical_collectives.startup``: their arrival skew is
the processes' start-up, not a late rank)."""

from __future__ import annotations

import duckdb

from nsyscomm import duck

# sql/setup_calls.sql's rule b: a first call is setup when it takes SETUP_FACTOR times the later
# calls' median and at least SETUP_MIN_NS (jitter on a 20 us call is no setup), compared with its
# own op when SETUP_MIN_LATER later calls of it are as large
SETUP_FACTOR = 10.0
SETUP_MIN_NS = 1_000_000
SETUP_MIN_LATER = 3


def mark_setup(con: duckdb.DuckDBPyConnection) -> int:
    """Set collectives.setup and logical_collectives.setup on the (calls of the) logical
    collectives that set up their communicator; returns how many calls."""
    con.execute(
        f"CREATE OR REPLACE TABLE setup_ids AS {duck.sql('setup_calls')}",
        {"min_ns": SETUP_MIN_NS, "factor": SETUP_FACTOR, "min_later": SETUP_MIN_LATER},
    )
    if not _count(con, "SELECT count(*) FROM setup_ids"):
        return 0
    con.execute("UPDATE collectives SET setup = true WHERE logical_id IN (SELECT logical_id FROM setup_ids)")
    con.execute("UPDATE logical_collectives SET setup = true WHERE logical_id IN (SELECT logical_id FROM setup_ids)")
    return _count(con, "SELECT count(*) FROM collectives WHERE setup")


def _count(con: duckdb.DuckDBPyConnection, query: str) -> int:
    row = con.execute(query).fetchone()
    return int(row[0]) if row else 0


def mark_startup(con: duckdb.DuckDBPyConnection) -> None:
    """Set logical_collectives.startup on the collectives that are every participant's first call
    of the job: the ranks meet there for the first time, so the difference of their arrivals is
    when their processes started and reached it, not a late rank."""
    con.execute("""
        UPDATE logical_collectives SET startup = true
        FROM (SELECT logical_id, count(*) AS firsts
              FROM (SELECT rank, arg_min(logical_id, (exec_start, cpu_start, logical_id)) AS logical_id
                    FROM collectives WHERE rank IS NOT NULL GROUP BY rank)
              GROUP BY logical_id) f
        WHERE f.logical_id = logical_collectives.logical_id
          AND logical_collectives.participants >= 2 AND f.firsts = logical_collectives.participants""")
