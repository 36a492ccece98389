-- Per training step (from the wrapper's step field: a step begins at optimizer.step() or
-- nsyscomm.step(i), step 0 is what precedes the first): communication time summed over ranks
-- (each rank's time with a call in flight),
-- (waiting for late ranks included), the rank with the most of it, the rank that kept the others
-- waiting longest (the last to arrive, weighted by how late), and the step's mean and worst
-- arrival skew. Input: collectives, logical_collectives. Calls that set up their communicator are
-- left out of the time, and of the skew those set aside whole (not a call holding NCCL's init:
-- its arrivals leave the init out), as is the skew start-up explains (startup), and calls that never
-- completed (the hang diagnosis's). A rank's lateness is counted once (logical_collectives.late_ns):
-- at the first of the calls queued on a communicator that it delayed.
WITH in_step AS (
    SELECT step, rank, exec_start AS s, exec_end AS e
    FROM collectives WHERE step IS NOT NULL AND NOT setup AND exec_start IS NOT NULL AND completed
),
-- a rank's time in flight in the step, calls in flight together counted once (as sql/ranks.sql):
-- each span's part not covered by the spans that began before it
parts AS (
    SELECT step, rank, greatest(0, e - greatest(s, coalesce(max(e) OVER w, s))) AS ns
    FROM in_step
    WINDOW w AS (PARTITION BY step, rank ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
per_rank AS (
    SELECT step, rank, sum(ns) AS comm_ns, count(*) AS calls FROM parts GROUP BY step, rank
),
skew AS (
    SELECT step, avg(last_arrival - first_arrival) AS avg_skew_ns, max(last_arrival - first_arrival) AS max_skew_ns
    FROM logical_collectives WHERE step IS NOT NULL AND participants >= 2 AND NOT whole_setup AND NOT startup AND completed AND NOT shadow
    GROUP BY step
),
late_by AS (
    SELECT step, last_rank, sum(late_ns) AS late_ns
    FROM logical_collectives
    WHERE step IS NOT NULL AND participants >= 2 AND late_ns > 0 AND NOT whole_setup AND NOT startup AND completed AND NOT shadow
    GROUP BY step, last_rank
),
late AS (
    -- tie on delay: the smallest rank is named
    SELECT step, arg_max(last_rank, (late_ns, -last_rank)) AS late_rank, max(late_ns) AS late_ns
    FROM late_by GROUP BY step
)
SELECT p.step,
       sum(p.calls)                AS calls,
       sum(p.comm_ns) / 1e6        AS comm_ms,
       max(p.comm_ns) / 1e6        AS max_rank_comm_ms,
       arg_max(p.rank, p.comm_ns)  AS max_rank,
       any_value(s.avg_skew_ns) / 1e6 AS avg_skew_ms,
       any_value(s.max_skew_ns) / 1e6 AS max_skew_ms,
       any_value(l.late_rank)      AS late_rank,
       any_value(l.late_ns) / 1e6  AS late_ms
FROM per_rank p LEFT JOIN skew s ON s.step = p.step LEFT JOIN late l ON l.step = p.step
GROUP BY p.step ORDER BY p.step
