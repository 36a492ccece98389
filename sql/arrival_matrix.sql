-- Every rank's arrival at every logical collective that two ranks or more took part in: the
-- HTML report's rank x collective heatmap (delay after the first arrival, time waited).
-- Inputs: collectives, logical_collectives.
SELECT c.rank, l."group", l.op, l.seq, l.step, l.first_arrival,
       (c.exec_start - l.first_arrival) / 1e6 AS delay_ms,
       (c.duration_ns - l.latency_ns) / 1e6                       AS wait_ms
FROM collectives c
JOIN logical_collectives l
  ON l.logical_id = c.logical_id
WHERE l.participants >= 2
ORDER BY l.first_arrival, l.op, l.seq, l."group" NULLS FIRST, l.pair NULLS FIRST, c.rank, c.cpu_start
