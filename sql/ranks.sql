-- mpitrace's per-task table: calls, bytes, communication time, waiting, elapsed, % comm.
-- comm = the time at least one of the rank's calls was in flight: the union of their execution
-- spans, so calls in flight together (DDP's buckets, FSDP's prefetch on a second stream) count
-- once and % comm never passes 100. wait = the part of that time spent waiting for other ranks:
-- the union of each call's first (duration - its logical collective's latency), the time before
-- the last rank arrived. Calls that set up their communicator are left out, but for a call holding
-- NCCL's init its wait for late ranks (its exec_start leaves the init out, sql/collectives.sql):
-- that wait is communication, the init and the call's own transfer are setup. Calls that never
-- completed (collectives.completed) belong to the hang diagnosis.
-- bytes: the counted calls' sizes summed, NULL when one of them has an unknown size (a sum of
-- the known ones would pass for the rank's whole traffic).
-- Inputs: collectives, logical_collectives, rank_spans (rank, host, first_ns, last_ns).
WITH rows AS (
    SELECT c.rank, c.bytes, c.exec_start AS s, c.exec_end AS e, c.setup,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we
    FROM collectives c
    JOIN logical_collectives l
      ON l.logical_id = c.logical_id
    WHERE NOT l.whole_setup AND c.exec_start IS NOT NULL AND c.exec_end IS NOT NULL AND c.completed
),
per_row AS (
    SELECT rank, bytes, s, e, we, true AS counted FROM rows WHERE NOT setup
    UNION ALL
    SELECT rank, NULL, s, we, we, false FROM rows WHERE setup AND we > s
),
-- each span's part not covered by the rank's spans that began before it: their sum is the union
-- (one sort for both: a union's length does not depend on the order of spans that start together)
parts AS (
    SELECT rank, greatest(0, e - greatest(s, coalesce(max(e) OVER w, s))) AS comm_ns,
           greatest(0, we - greatest(s, coalesce(max(we) OVER w, s))) AS wait_ns
    FROM per_row
    WINDOW w AS (PARTITION BY rank ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
per_rank AS (
    SELECT rank, count(*) FILTER (WHERE counted) AS calls,
           CASE WHEN count(*) FILTER (WHERE counted AND bytes IS NULL) = 0
                THEN coalesce(sum(bytes) FILTER (WHERE counted), 0) END AS bytes
    FROM per_row GROUP BY rank
),
comm AS (SELECT rank, sum(comm_ns) AS comm_ns, sum(wait_ns) AS wait_ns FROM parts GROUP BY rank)
SELECT p.rank, s.host, p.calls, p.bytes,
       c.comm_ns / 1e6                                  AS comm_ms,
       c.wait_ns / 1e6                                  AS wait_ms,
       (s.last_ns - s.first_ns) / 1e6                   AS elapsed_ms,
       CASE WHEN s.last_ns > s.first_ns THEN 100.0 * c.comm_ns / (s.last_ns - s.first_ns) END AS comm_pct
FROM per_rank p
JOIN comm c ON c.rank = p.rank
LEFT JOIN rank_spans s ON s.rank = p.rank
ORDER BY p.rank
