"""The per-rank table (sql/ranks.sql) counts time in flight once: calls in flight together (DDP's
buckets, FSDP's prefetch on a second stream, any asynchronous call) add their union, not their
sum, so `% comm` never passes 100. The truth here is a plain merge of intervals in Python."""

from __future__ import annotations

import random

import pytest

from nsyscomm import duck


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _ranks(calls: list[tuple[int, int, int, int]], latency: dict[int, int], spans: dict[int, tuple[int, int]]):
    """calls: (rank, logical_id, start, end)."""
    con = duck.connect()
    try:
        con.execute(
            "CREATE TABLE collectives (rank INTEGER, logical_id BIGINT, bytes BIGINT, exec_start BIGINT, "
            "exec_end BIGINT, duration_ns BIGINT, setup BOOLEAN, completed BOOLEAN)"
        )
        con.executemany(
            "INSERT INTO collectives VALUES (?, ?, 8, ?, ?, ?, false, true)",
            [(r, i, s, e, e - s) for r, i, s, e in calls],
        )
        con.execute("CREATE TABLE logical_collectives (logical_id BIGINT, latency_ns BIGINT, whole_setup BOOLEAN)")
        con.executemany("INSERT INTO logical_collectives VALUES (?, ?, false)", list(latency.items()))
        con.execute("CREATE TABLE rank_spans (rank INTEGER, host VARCHAR, first_ns BIGINT, last_ns BIGINT)")
        con.executemany("INSERT INTO rank_spans VALUES (?, 'h', ?, ?)", [(r, a, b) for r, (a, b) in spans.items()])
        return {row[0]: row for row in con.execute(duck.sql("ranks")).fetchall()}
    finally:
        con.close()


def test_calls_in_flight_together_count_once():
    # rank 0: three buckets enqueued back to back, each in flight until the transfers end
    calls = [(0, 1, 0, 10_000_000), (0, 2, 1_000_000, 12_000_000), (0, 3, 2_000_000, 14_000_000)]
    calls += [(1, 1, 0, 10_000_000), (1, 2, 1_000_000, 12_000_000), (1, 3, 2_000_000, 14_000_000)]
    latency = {1: 10_000_000, 2: 11_000_000, 3: 12_000_000}
    rows = _ranks(calls, latency, {0: (0, 20_000_000), 1: (0, 20_000_000)})
    rank, _host, n, _bytes, comm_ms, wait_ms, elapsed_ms, pct = rows[0]
    assert n == 3
    assert comm_ms == pytest.approx(14.0)  # the sum would say 33 ms in a 20 ms run
    assert wait_ms == pytest.approx(0.0)
    assert pct == pytest.approx(70.0)


@pytest.mark.parametrize("seed", range(8))
def test_comm_and_wait_are_the_unions_of_their_intervals(seed):
    rnd = random.Random(seed)
    calls, latency = [], {}
    for lid in range(60):
        lat = rnd.randint(1, 3_000_000)
        latency[lid] = lat
        for rank in (0, 1):
            s = rnd.randint(0, 50_000_000)
            calls.append((rank, lid, s, s + lat + rnd.choice([0, rnd.randint(0, 4_000_000)])))
    spans = {r: (0, 60_000_000) for r in (0, 1)}
    rows = _ranks(calls, latency, spans)
    for rank in (0, 1):
        mine = [(s, e) for r, _, s, e in calls if r == rank]
        waits = [(s, s + (e - s - latency[lid])) for r, lid, s, e in calls if r == rank]
        _, _, _, _, comm_ms, wait_ms, elapsed_ms, pct = rows[rank]
        assert comm_ms == pytest.approx(_union(mine) / 1e6)
        assert wait_ms == pytest.approx(_union(waits) / 1e6)
        assert wait_ms <= comm_ms <= elapsed_ms and 0 <= pct <= 100
