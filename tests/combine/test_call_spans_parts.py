"""sql/call_spans.sql's parts and partitions: each part (numbering by order, messages, a
stream's queue, a gloo group's queue) runs where a call needs it (calls.Needs, counted over the
calls) and gives the same rows as when every part runs; the queue windows take a process's calls
by its rank, and the calls of no known process by their report and pid."""

from __future__ import annotations

import pytest

from nsyscomm import duck
from nsyscomm.combine.calls import SELECT_NEEDS, Needs, _typed_select, create_collectives

COLS = ("report", "pid", "tid", "op", "api", '"group"', "seq", "peer", "source", "cpu_start", "cpu_end")
COLS += ("gpu_start", "gpu_end", "stream", "device", "call_id")


def _job(rows, ranks):
    """A job database whose view calls holds these calls (tuples of COLS) and proc_ranks these
    (report, pid, rank) processes."""
    con = duck.connect()
    con.execute(f"CREATE TABLE calls AS {_typed_select(None, '')}")
    marks = ", ".join("?" for _ in COLS)
    con.executemany(f"INSERT INTO calls ({', '.join(COLS)}) VALUES ({marks})", [list(r) for r in rows])
    con.execute("CREATE TABLE proc_ranks (report VARCHAR, pid BIGINT, rank INTEGER, local_rank INTEGER, host VARCHAR)")
    con.executemany("INSERT INTO proc_ranks VALUES (?, ?, ?, NULL, NULL)", [list(r) for r in ranks])
    return con


def _collectives(con, needs: Needs):
    con.execute("DROP TABLE IF EXISTS collectives")
    create_collectives(con, needs)
    return con.execute("FROM collectives ORDER BY report, pid, tid, op, cpu_start, stream").fetchall()


def test_a_stream_queue_is_one_process_s_whatever_the_reports_share():
    """Two reports' processes of the same pid, on the same device and stream, queue apart (they
    have two ranks); so do calls of no known process: by their report, and by their pid."""
    ar, g = "all_reduce", "g"
    rows = [
        ("a", 1, 1, ar, ar, g, 0, None, "wrapper", 0, 10, 100, 200, 7, 0, 0),
        ("a", 1, 1, ar, ar, g, 1, None, "wrapper", 20, 30, 300, 400, 7, 0, 1),  # waits for call 0
        ("b", 1, 1, ar, ar, g, 0, None, "wrapper", 5, 15, 150, 500, 7, 0, 2),
        ("a", None, 1, ar, ar, g, 2, None, "wrapper", 0, 10, 100, 300, 9, 0, 3),
        ("b", None, 1, ar, ar, g, 2, None, "wrapper", 5, 15, 150, 160, 9, 0, 4),
        ("a", 2, 1, ar, ar, g, 3, None, "wrapper", 1, 11, 120, 130, 9, 0, 5),  # pid 2: no rank
    ]
    con = _job(rows, [("a", 1, 0), ("b", 1, 1)])
    try:
        create_collectives(con, Needs(*duck.one_row(con, f"SELECT {SELECT_NEEDS} FROM calls")))
        got = con.execute("SELECT report, pid, stream, cpu_start, queued_ns FROM collectives").fetchall()
    finally:
        con.close()
    # merged by pid, call 2 would wait 145 ns behind call 0; merged without their report or pid,
    # calls 4 and 5 would wait behind call 3
    assert sorted(got, key=str) == sorted(
        [("a", 1, 7, 0, 0), ("a", 1, 7, 20, 180), ("b", 1, 7, 5, 0), ("a", None, 9, 0, 0), ("b", None, 9, 5, 0)]
        + [("a", 2, 9, 1, 0)],
        key=str,
    )


# the calls of one kind each: (the rows, the part of Needs they need)
KINDS = {
    # NCCL kernels without the wrapper's seq: numbered by order, on their streams
    "unnumbered": (
        [
            (
                r,
                1,
                1,
                "all_reduce",
                None,
                None,
                None,
                None,
                "nsys",
                10 * i + k,
                10 * i + 5,
                100 * i + k,
                100 * i + 50,
                7,
                0,
                2 * i + k,
            )
            for i in range(3)
            for k, r in enumerate(("a", "b"))
        ],
        "unnumbered",
    ),
    # gloo sends and their receives: point-to-point calls (a send's end: its receive's)
    "messages": (
        [
            ("a", 1, 1, "send", "send", "g", 0, 1, "wrapper", 0, 50, None, None, None, None, 0),
            ("b", 1, 1, "recv", "recv", "g", 0, 0, "wrapper", 2, 30, None, None, None, None, 1),
            ("a", 1, 1, "send", "send", "g", 1, 1, "wrapper", 40, 80, None, None, None, None, 2),
            ("b", 1, 1, "recv", "recv", "g", 1, 0, "wrapper", 41, 60, None, None, None, None, 3),
        ],
        "messages",
    ),
    # gloo collectives, in their group's queue
    "group_queues": (
        [
            (
                r,
                1,
                1,
                "all_reduce",
                "all_reduce",
                "g",
                i,
                None,
                "wrapper",
                10 * i,
                10 * i + 25,
                None,
                None,
                None,
                None,
                2 * i + k,
            )
            for i in range(4)
            for k, r in enumerate(("a", "b"))
        ],
        "group_queues",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_part_runs_where_the_calls_need_it_and_gives_the_same_rows(kind):
    rows, part = KINDS[kind]
    con = _job(rows, [("a", 1, 0), ("b", 1, 1)])
    try:
        needs = Needs(*duck.one_row(con, f"SELECT {SELECT_NEEDS} FROM calls"))
        assert getattr(needs, part)
        assert sum(needs.__dict__.values()) == (2 if kind == "unnumbered" else 1)  # with their stream
        assert _collectives(con, needs) == _collectives(con, Needs())
        if kind == "messages":  # each receive bounds its send's end: the message part ran
            ends = con.execute("SELECT op, exec_end FROM collectives ORDER BY cpu_start").fetchall()
            assert ends == [("send", 30), ("recv", 30), ("send", 60), ("recv", 60)]
    finally:
        con.close()
