-- Per training step (from the wrapper's step field): communication time summed over ranks,
-- the busiest rank's time, and the step's mean and worst arrival skew. Input: collectives,
-- logical_collectives. Calls that set up their communicator are left out.
WITH per_rank AS (
    SELECT step, rank, sum(duration_ns) AS comm_ns, count(*) AS calls
    FROM collectives WHERE step IS NOT NULL AND NOT setup GROUP BY step, rank
),
skew AS (
    SELECT step, avg(last_arrival - first_arrival) AS avg_skew_ns, max(last_arrival - first_arrival) AS max_skew_ns
    FROM logical_collectives WHERE step IS NOT NULL AND participants >= 2 AND NOT setup GROUP BY step
)
SELECT p.step,
       sum(p.calls)                AS calls,
       sum(p.comm_ns) / 1e6        AS comm_ms,
       max(p.comm_ns) / 1e6        AS max_rank_comm_ms,
       arg_max(p.rank, p.comm_ns)  AS max_rank,
       any_value(s.avg_skew_ns) / 1e6 AS avg_skew_ms,
       any_value(s.max_skew_ns) / 1e6 AS max_skew_ms
FROM per_rank p LEFT JOIN skew s ON s.step = p.step
GROUP BY p.step ORDER BY p.step
