-- The logical collectives with the largest arrival skew (last arrival - first arrival),
-- with who arrived last and where the call was made; setup and start-up collectives left out
-- (sql/skew.sql), and those that never completed. late_ms: the lateness counted there
-- (logical_collectives.late_ns): of several calls queued behind one late arrival, only the first
-- carries it, and the list is ordered by it. Inputs: logical_collectives. $limit rows.
SELECT op, "group", pair, seq, bytes, step, caller, participants, last_rank,
       (last_arrival - first_arrival) / 1e6 AS skew_ms,
       latency_ns / 1e6                    AS latency_ms,
       late_ns / 1e6                       AS late_ms
FROM logical_collectives
WHERE participants >= 2 AND NOT setup AND NOT startup AND completed AND NOT shadow
-- ties broken down to the collective (group, pair): the same rows, in the same order, every run
ORDER BY late_ns DESC, last_arrival - first_arrival DESC, op, seq, "group" NULLS FIRST, pair NULLS FIRST
LIMIT $limit
