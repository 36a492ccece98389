-- Per step, across the ranks: its first start and last end, its time (from the previous step's
-- last end to its own; the first step from its first start: as the what-if replay counts a
-- step) and its setup calls (nsyscomm.analyses.warmup).
-- Input: collectives.
WITH s AS (
    SELECT c.step,
           min(c.exec_start)                      AS first_ns,
           max(c.exec_end)                          AS last_ns,
           count(*) FILTER (WHERE c.setup)                              AS setup_calls
    FROM collectives c
    WHERE c.step IS NOT NULL
    GROUP BY c.step
)
SELECT step, first_ns, last_ns, setup_calls,
       last_ns - coalesce(lag(last_ns) OVER (ORDER BY step), first_ns) AS step_ns
FROM s ORDER BY step
