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
-- The rows (sql/ranks_spans.sql) come as `spans`, each with its part of its rank's unions
-- (nsyscomm/analyses/spans.py): comm_ns of the execution spans', wait_ns of the waits'.
-- Inputs: spans, rank_spans (rank, host, first_ns, last_ns).
WITH per_rank AS (
    SELECT rank, count(*) FILTER (WHERE counted) AS calls,
           CASE WHEN count(*) FILTER (WHERE counted AND bytes IS NULL) = 0
                THEN coalesce(sum(bytes) FILTER (WHERE counted), 0) END AS bytes
    FROM spans GROUP BY rank
),
comm AS (SELECT rank, sum(comm_ns) AS comm_ns, sum(wait_ns) AS wait_ns FROM spans GROUP BY rank)
SELECT p.rank, s.host, p.calls, p.bytes,
       c.comm_ns / 1e6                                  AS comm_ms,
       c.wait_ns / 1e6                                  AS wait_ms,
       (s.last_ns - s.first_ns) / 1e6                   AS elapsed_ms,
       CASE WHEN s.last_ns > s.first_ns THEN 100.0 * c.comm_ns / (s.last_ns - s.first_ns) END AS comm_pct
FROM per_rank p
JOIN comm c ON c.rank = p.rank
LEFT JOIN rank_spans s ON s.rank = p.rank
ORDER BY p.rank
