-- Per step, across the ranks: its first start and last end, its time (from the previous step's
-- end to its own; the first step from its first start: as the what-if replay counts a
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
-- A step ends once every step up to it has ended (a call of one step may end after the next
-- step's last one: an asynchronous call waited for a step later), so no step time is negative.
, ends AS (
    SELECT *, max(last_ns) OVER (ORDER BY step ROWS UNBOUNDED PRECEDING) AS end_ns FROM s
)
SELECT step, first_ns, last_ns, setup_calls,
       end_ns - coalesce(lag(end_ns) OVER (ORDER BY step), first_ns) AS step_ns
FROM ends ORDER BY step
