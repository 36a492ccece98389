-- Arrival skew per rank over the logical collectives that several ranks took part in:
-- how often the rank arrived last, by how much it trailed the first arrival on average,
-- and how long it waited for others: the steady pattern. Left out: calls set aside whole as setup
-- (a call holding NCCL's init stays: its arrivals leave the init out, sql/collectives.sql), the job's
-- first meetings (first_meet: every participant's first call), whose skew is what the processes
-- did before they first met -- start-up, or a lateness the Diagnosis names (late_arrivals.sql),
-- no communication the gate compares --, calls that never completed (the hang diagnosis's), and
-- Join's shadow collectives (shadow: a rank that ran out of inputs matches the others', its waiting
-- there is its absence).
-- wait: the time the rank was blocked waiting for the others, each interval once: a call's wait
-- is the start of its execution (duration - its collective's latency), and calls waiting together
-- (several queued on one late arrival) count once, as sql/ranks.sql counts them.
-- Inputs: collectives, logical_collectives.
WITH shared AS (
    SELECT * FROM logical_collectives WHERE participants >= 2 AND NOT whole_setup AND NOT first_meet AND completed AND NOT shadow
),
per_row AS (
    SELECT c.rank,
           (l.last_rank = c.rank)::INTEGER                     AS is_last,
           c.exec_start - l.first_arrival AS delay_ns,
           c.exec_start                                        AS s,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we
    FROM collectives c
    JOIN shared l ON l.logical_id = c.logical_id
),
-- each wait's part not covered by the rank's waits that began before it: their sum is the union
parts AS (
    SELECT *, greatest(0, we - greatest(s, coalesce(max(we) OVER w, s))) AS wait_ns
    FROM per_row
    WINDOW w AS (PARTITION BY rank ORDER BY s, we ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT rank,
       sum(is_last)             AS late_count,
       avg(delay_ns) / 1e6      AS avg_arrival_delay_ms,
       sum(wait_ns) / 1e6       AS wait_ms,
       count(*)                 AS instances
FROM parts GROUP BY rank ORDER BY rank
