-- The job's first meetings (sql/first_meetings.sql) as the set-aside lines show them: the skew,
-- the part start-up explains (startup_ms) and the rest, lateness (late_ms); set_aside: the whole
-- skew is start-up (logical_collectives.startup), no rank is named late for it.
-- Inputs: first_meetings, logical_collectives.
SELECT l.op, l."group", l.step, l.participants, l.last_rank,
       m.skew_ns / 1e6                          AS skew_ms,
       (m.skew_ns - m.unexplained_ns) / 1e6     AS startup_ms,
       m.unexplained_ns / 1e6                   AS late_ms,
       l.startup                                AS set_aside
FROM first_meetings m JOIN logical_collectives l USING (logical_id)
ORDER BY l.first_arrival, l.op, l."group" NULLS FIRST
