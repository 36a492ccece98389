"""What a job's statistics set aside (docs/architecture.md, "Setup calls and warm-up steps"):
the calls that set up their communicator (``collectives.setup``, sql/setup_calls.sql), the
collectives that are their ranks' first (``logical_collectives.startup``: their arrival skew is
the processes' start-up, not a late rank), and the calls that never completed
(``collectives.completed``: they belong to the hang diagnosis)."""

from __future__ import annotations

import os
from collections.abc import Iterable

import duckdb

from nsyscomm import duck
from nsyscomm.analyses import hang
from nsyscomm.analyses.warmup import STARTUP_SLACK_NS

# sql/setup_calls.sql's rule b: a first call on a device is setup when it takes SETUP_FACTOR times
# the later calls' median and at least SETUP_MIN_NS, compared with its own op when SETUP_MIN_LATER
# later calls of it are as large. SETUP_MIN_NS: a first call's own noise (allocation, a cold cache)
# stays far below it, NCCL's initialization of a communicator (hundreds of ms) far above
SETUP_FACTOR = 10.0
SETUP_MIN_NS = 50_000_000
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
    # a call holding NCCL's init ranges is setup for its time only: its arrival leaves the init
    # out (sql/call_spans.sql), so a rank late to it beyond the init is named late; one set aside
    # by its length alone is setup whole, its skew too (nothing there tells an init from a late rank)
    con.execute(
        "UPDATE logical_collectives SET setup = true, whole_setup = s.how <> 'nccl_init' "
        "FROM setup_ids s WHERE s.logical_id = logical_collectives.logical_id"
    )
    return _count(con, "SELECT count(*) FROM collectives WHERE setup")


def _count(con: duckdb.DuckDBPyConnection, query: str) -> int:
    row = con.execute(query).fetchone()
    return int(row[0]) if row else 0


def mark_startup(con: duckdb.DuckDBPyConnection) -> None:
    """Set logical_collectives.first_meet on the collectives that are every participant's first
    call (sql/first_meetings.sql), and startup on those whose whole arrival skew start-up
    explains: no rank is named late there. Beyond STARTUP_SLACK_NS of what start-up explains, a
    rank's lateness is lateness, named like any other (a slow checkpoint load, a first batch)."""
    con.execute(f"CREATE OR REPLACE TABLE first_meetings AS {duck.sql('first_meetings')}")
    con.execute(
        "UPDATE logical_collectives SET first_meet = true, startup = m.unexplained_ns <= $slack "
        "FROM first_meetings m WHERE m.logical_id = logical_collectives.logical_id",
        {"slack": STARTUP_SLACK_NS},
    )


def mark_unfinished(con: duckdb.DuckDBPyConnection, sources: Iterable[str | os.PathLike]) -> int:
    """Set collectives.completed false on the calls the flight records beside the reports
    (``nsyscomm run``'s records/, nsyscomm.analyses.hang) saw entered and never finished: nsys
    closes a range left open at the process's end, so a call stuck until the job was ended looks
    like one that lasted that long. Returns how many calls."""
    records, _ = hang.read_records(hang.record_dirs(sources))
    if records.empty:
        return 0
    left = records.loc[~records["finished"].astype(bool), ["rank", "group", "seq"]]
    if left.empty:
        return 0
    con.register("unfinished_records", left)
    try:
        con.execute(
            "UPDATE collectives SET completed = false FROM unfinished_records u "
            'WHERE collectives.rank = u.rank AND collectives."group" = u."group" AND collectives.seq = u.seq '
            "AND collectives.op NOT IN ('send', 'recv')"
        )
    finally:
        con.unregister("unfinished_records")
    return _count(con, "SELECT count(*) FROM collectives WHERE NOT completed")
