-- The rows of sql/skew.sql, whose parts of each rank's union of waits nsyscomm/analyses/spans.py
-- adds (wait_ns over (s, we), per rank): the calls of the logical collectives that several ranks
-- took part in, steady ones only (which, and why: sql/skew.sql). Inputs: collectives,
-- logical_collectives.
WITH shared AS (
    SELECT * FROM logical_collectives WHERE participants >= 2 AND NOT whole_setup AND NOT first_meet AND completed AND NOT shadow
)
SELECT c.rank,                                                     -- the call's rank
       (l.last_rank = c.rank)::INTEGER                     AS is_last,   -- 1: it arrived last
       c.exec_start - l.first_arrival AS delay_ns,         -- its arrival after the first rank (ns)
       c.exec_start                                        AS s,         -- its arrival (ns)
       c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we    -- the end of its waiting
FROM collectives c
JOIN shared l ON l.logical_id = c.logical_id
