-- mpitrace's per-rank table by routine: per rank and op, the calls, their bytes and the time
-- spent in them, and how much of that time was waiting for late ranks.
-- calls: the rank's calls of the op; bytes: their sizes summed, NULL when one is unknown (as
-- sql/ranks.sql); time_ms: their execution times summed (mpitrace sums each routine's calls;
-- calls of one op in flight together count each, so the ops' times may sum past the rank's comm);
-- wait_ms: of that, each call's duration beyond its logical collective's fastest rank's.
-- Calls that set up their communicator are left out. Inputs: collectives, logical_collectives.
SELECT c.rank, c.op,
       count(*)                                                           AS calls,
       CASE WHEN count(*) FILTER (WHERE c.bytes IS NULL) = 0 THEN sum(c.bytes) END AS bytes,
       sum(c.exec_end - c.exec_start) / 1e6                               AS time_ms,
       sum(greatest(0, c.duration_ns - l.latency_ns)) / 1e6               AS wait_ms
FROM collectives c
JOIN logical_collectives l ON l.logical_id = c.logical_id
WHERE NOT c.setup AND c.exec_start IS NOT NULL AND c.exec_end IS NOT NULL
GROUP BY c.rank, c.op
ORDER BY c.rank, time_ms DESC, c.op
