-- DeepSpeed-style summary: per op and message size (and communicator size, so busbw uses
-- the right n); per caller too when $by_caller. Latencies are logical collectives' (min over
-- ranks; min_ms is the key's fastest one); calls and ranks count the per-rank rows. Calls that set up their communicator are left
-- out (sql/setup_calls.sql). A point-to-point message is one logical collective (its send and
-- its receive); it is listed under send and under recv, each with its own calls and the
-- message's latency (the receive's wait for its send left out, as a late rank's is).
-- A latency is the execution span's, never the time a call waited in its queue behind the calls
-- issued before it (collectives.queued_ns): queued_ms, beside it, is that wait, averaged over the
-- key's calls. A logical collective that never completed has no latency: it is the hang
-- diagnosis's, not a row here.
-- Inputs: collectives, logical_collectives, busbw_factors.
WITH sides AS (
    SELECT logical_id, op, count(*) AS n FROM collectives WHERE pair IS NOT NULL GROUP BY ALL
),
lc AS (
    SELECT *, CASE WHEN $by_caller THEN caller END AS key_caller FROM logical_collectives
    WHERE NOT setup AND completed AND pair IS NULL
    UNION ALL BY NAME
    SELECT l.* REPLACE (s.op AS op, s.n AS participants), CASE WHEN $by_caller THEN l.caller END AS key_caller
    FROM logical_collectives l JOIN sides s ON s.logical_id = l.logical_id
    WHERE NOT l.setup AND l.completed AND l.pair IS NOT NULL
),
per_key AS (
    SELECT op, bytes, group_size, key_caller,
           count(*)                          AS count,
           sum(participants)                 AS calls,
           sum(latency_ns)                   AS total_ns,
           median(latency_ns)                AS p50_ns,
           min(latency_ns)                   AS min_ns,
           max(latency_ns)                   AS max_ns
    FROM lc GROUP BY ALL
),
-- a call's row is its logical collective's key, its size included: the ranks of an all-to-all
-- with uneven split sizes each send their own, and all of them took part in it
row_keys AS (
    SELECT c.op, l.bytes, l.group_size, CASE WHEN $by_caller THEN l.caller END AS key_caller,
           count(DISTINCT c.rank) AS ranks,
           avg(c.queued_ns) AS queued_ns,
           string_agg(DISTINCT c.dtype, ',' ORDER BY c.dtype) AS dtype
    FROM collectives c
    JOIN logical_collectives l
      ON l.logical_id = c.logical_id
    WHERE NOT l.setup AND l.completed
    GROUP BY ALL
)
SELECT
    p.op, p.bytes, p.count, p.calls, r.ranks,
    p.total_ns / 1e6                                 AS total_ms,
    p.total_ns / p.count / 1e6                       AS avg_ms,
    p.p50_ns / 1e6                                   AS p50_ms,
    -- the fastest call: host load only adds time to a call, so the fastest is its own cost
    -- (the gate's load-robust latency, docs/gate.md)
    p.min_ns / 1e6                                   AS min_ms,
    p.max_ns / 1e6                                   AS max_ms,
    -- bytes per ns is GB/s (1 GB = 1e9 bytes)
    CASE WHEN p.total_ns > 0 THEN p.bytes / (p.total_ns / p.count) END                                  AS algbw_GBps,
    CASE WHEN p.total_ns > 0 THEN p.bytes / (p.total_ns / p.count) * f.factor END                       AS busbw_GBps,
    p.group_size, r.dtype, p.key_caller AS caller,
    r.queued_ns / 1e6                                AS queued_ms
FROM per_key p
JOIN row_keys r
  ON r.op = p.op AND r.bytes IS NOT DISTINCT FROM p.bytes AND r.group_size IS NOT DISTINCT FROM p.group_size
 AND r.key_caller IS NOT DISTINCT FROM p.key_caller
LEFT JOIN busbw_factors f ON f.op = p.op AND f.group_size = p.group_size
-- a caller's sizes together (per op), so that each (op, caller) heading of the text table is one block
ORDER BY p.op, p.key_caller NULLS LAST, p.bytes NULLS LAST, p.group_size
