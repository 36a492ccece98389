-- The rows of sql/steady_ranks.sql, whose parts of each rank's unions nsyscomm/analyses/spans.py
-- adds (comm_part over (s, e), wait_part over (s, we), per rank): the calls it counts, each with
-- its execution span, the end of its waiting for the last rank (we) and its arrival delay.
-- Which calls, and why: sql/steady_ranks.sql. Inputs: collectives, logical_collectives.
WITH per_step AS (
    SELECT step, count(*) AS calls FROM collectives WHERE step IS NOT NULL AND NOT setup GROUP BY step
),
tail AS (
    SELECT max(step) AS step FROM per_step
    HAVING count(*) >= 3 AND arg_max(calls, step) < median(calls)
)
SELECT c.rank,                                                     -- the call's rank
       c.exec_start AS s,                                          -- its execution's start (ns)
       c.exec_end AS e,                                            -- its execution's end (ns)
       c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we,  -- the end of its waiting
       -- its arrival after the first rank (ns), over collectives of two ranks or more (not a
       -- shadow of a rank that joined under Join: its arrival skew is that rank's absence)
       CASE WHEN l.participants >= 2 AND NOT l.shadow THEN c.exec_start - l.first_arrival END AS delay_ns
FROM collectives c JOIN logical_collectives l USING (logical_id)
WHERE NOT c.setup AND c.exec_start IS NOT NULL AND c.completed AND NOT l.first_meet
  AND c.step IS DISTINCT FROM (SELECT step FROM tail)
  AND NOT list_contains(list_transform(string_split($warmup, ','), x -> TRY_CAST(x AS BIGINT)), coalesce(c.step, -1))
