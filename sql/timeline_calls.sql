-- The calls of the trace's timeline (nsyscomm.views.trace) with their logical collective's
-- participants and fastest duration, the time waited and the arrival delay; steps [$lo, $hi)
-- when given (NULL: unbounded; $by_step false: every call, with or without a step).
-- Inputs: collectives, logical_collectives.
SELECT c.*,
       l.participants,
       l.latency_ns,
       c.duration_ns - l.latency_ns                          AS wait_ns,
       c.exec_start - l.first_arrival  AS arrival_delay_ns
FROM collectives c
LEFT JOIN logical_collectives l
  ON l.logical_id = c.logical_id
WHERE NOT $by_step OR (c.step IS NOT NULL AND ($lo IS NULL OR c.step >= $lo) AND ($hi IS NULL OR c.step < $hi))
ORDER BY c.rank, c.exec_start, c.seq, c."group" NULLS FIRST, c.cpu_start, c.pid, c.tid
