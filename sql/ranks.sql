-- mpitrace's per-task table: calls, bytes, communication time, waiting, elapsed, % comm.
-- wait = a call's duration beyond its logical collective's latency (time spent waiting for
-- other ranks). Calls that set up their communicator are left out. Inputs: collectives, logical_collectives, rank_spans (rank, host, first_ns, last_ns).
WITH per_row AS (
    SELECT c.rank, c.duration_ns, coalesce(c.bytes, 0) AS bytes, c.duration_ns - l.latency_ns AS wait_ns
    FROM collectives c
    JOIN logical_collectives l
      ON l.logical_id = c.logical_id
    WHERE NOT c.setup
),
per_rank AS (
    SELECT rank, count(*) AS calls, sum(bytes) AS bytes, sum(duration_ns) AS comm_ns, sum(wait_ns) AS wait_ns
    FROM per_row GROUP BY rank
)
SELECT p.rank, s.host, p.calls, p.bytes,
       p.comm_ns / 1e6                                  AS comm_ms,
       p.wait_ns / 1e6                                  AS wait_ms,
       (s.last_ns - s.first_ns) / 1e6                   AS elapsed_ms,
       CASE WHEN s.last_ns > s.first_ns THEN 100.0 * p.comm_ns / (s.last_ns - s.first_ns) END AS comm_pct
FROM per_rank p LEFT JOIN rank_spans s ON s.rank = p.rank
ORDER BY p.rank
