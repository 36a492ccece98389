-- Calls at the same (communicator, seq) that differ across ranks, in Flight Recorder's classes:
-- op, message size, dtype, group membership. All-to-all sizes may differ by design (uneven
-- splits): not compared. Flight Recorder's fifth class, state (finished on some ranks, not on
-- others), is not one here: when a collective fails (a peer died, a timeout), some ranks leave
-- it by an exception, recorded as not finished, while others were stopped in it or completed it,
-- so its ranks differ in state without any desync. A member missing from a collective is
-- hang_blocked's. One row per (group, seq, field, rank).
-- The keys that differ are found in one aggregation; only their calls are unpivoted. A key is
-- compared only when at least two ranks hold it, each once: a trace of one rank, or a source
-- whose seq is not unique per call (a PyTorch profiler trace's kernels), shows no desync.
-- A cheaper pass first keeps the keys whose calls are not all alike (sql/hang_maybe.sql, the
-- table hang_maybe); the distinct counts, five hash tables per key, run on those keys only: in
-- most jobs none, and then this query is not run (nsyscomm.analyses.hang).
-- Inputs: hang_calls, hang_maybe.
WITH bad AS (
    SELECT "group", seq,
           count(DISTINCT op) > 1 AS op_differs,
           count(DISTINCT bytes) FILTER (WHERE op <> 'all_to_all') > 1 AS bytes_differs,
           count(DISTINCT nullif(dtype, '')) > 1 AS dtype_differs,
           count(DISTINCT group_size::VARCHAR || ':' || group_ranks) > 1 AS members_differ
    FROM hang_calls JOIN hang_maybe USING ("group", seq) GROUP BY ALL
    HAVING count(DISTINCT rank) > 1 AND count(*) = count(DISTINCT rank)
       AND (op_differs OR bytes_differs OR dtype_differs OR members_differ)
),
c AS (SELECT h.*, b.op_differs, b.bytes_differs, b.dtype_differs, b.members_differ
      FROM hang_calls h JOIN bad b USING ("group", seq)),
v AS (
    SELECT "group", seq, 'op' AS field, rank, op AS value FROM c WHERE op_differs
    UNION ALL SELECT "group", seq, 'bytes', rank, bytes::VARCHAR FROM c
        WHERE bytes_differs AND op <> 'all_to_all' AND bytes IS NOT NULL
    UNION ALL SELECT "group", seq, 'dtype', rank, dtype FROM c WHERE dtype_differs AND nullif(dtype, '') IS NOT NULL
    UNION ALL SELECT "group", seq, 'group_membership', rank, group_size::VARCHAR || ':' || group_ranks
        FROM c WHERE members_differ AND group_size IS NOT NULL
)
SELECT "group", seq, field, rank, value FROM v
ORDER BY "group", seq, field, rank
