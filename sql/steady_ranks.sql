-- Per rank, the steady figures the gate compares (docs/gate.md, "Start-up and warm-up stay out"):
-- over the calls outside the warm-up steps ($warmup: their numbers, comma-separated, from
-- nsyscomm.analyses.warmup), the setup calls
-- the job's first meetings and the calls that never completed left out: what the processes did before their steady state (lazy
-- loading in a first backward pass, a checkpoint load) is no communication. comm_ms: the calls'
-- time; wait_ms: beyond their collective's latency; avg_arrival_delay_ms: arrival after the first
-- rank, over collectives of two ranks or more. The job's last step is left out too when it holds
-- fewer calls than the median step: no training step, what runs after the last optimizer step
-- (the teardown's barrier, where a rank waited 4.4 s for no communication in one of ten unchanged
-- runs on a loaded host). Inputs: collectives, logical_collectives.
WITH per_step AS (
    SELECT step, count(*) AS calls FROM collectives WHERE step IS NOT NULL AND NOT setup GROUP BY step
),
tail AS (
    SELECT max(step) AS step FROM per_step
    HAVING count(*) >= 3 AND arg_max(calls, step) < median(calls)
),
c AS (
    SELECT c.rank, c.exec_start AS s, c.exec_end AS e,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we,
           -- (a shadow of a rank that joined under Join: its arrival skew is that rank's absence)
           CASE WHEN l.participants >= 2 AND NOT l.shadow THEN c.exec_start - l.first_arrival END AS delay_ns
    FROM collectives c JOIN logical_collectives l USING (logical_id)
    WHERE NOT c.setup AND c.exec_start IS NOT NULL AND c.completed AND NOT l.first_meet AND c.step IS DISTINCT FROM (SELECT step FROM tail) AND NOT list_contains(list_transform(string_split($warmup, ','), x -> TRY_CAST(x AS BIGINT)), coalesce(c.step, -1))
),
-- comm and wait as sql/ranks.sql counts them: calls in flight together count once
-- (one sort for both: a union's length does not depend on the order of spans that start together)
parts AS (
    SELECT rank, delay_ns,
           greatest(0, e - greatest(s, coalesce(max(e) OVER w, s))) AS comm_part,
           greatest(0, we - greatest(s, coalesce(max(we) OVER w, s))) AS wait_part
    FROM c
    WINDOW w AS (PARTITION BY rank ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT rank, count(*) AS calls, sum(comm_part) / 1e6 AS comm_ms, sum(wait_part) / 1e6 AS wait_ms,
       avg(delay_ns) / 1e6 AS avg_arrival_delay_ms
FROM parts GROUP BY rank ORDER BY rank
