-- One row per rank: its host and the span of its processes' activity (first and last event, ns),
-- the elapsed time the per-rank table (ranks.sql) divides communication by.
-- Input: proc_ranks (report, pid -> rank), proc_spans (report, pid, first_ns, last_ns).
SELECT m.rank, min(m.host) AS host, min(s.first_ns) AS first_ns, max(s.last_ns) AS last_ns
FROM proc_ranks m JOIN proc_spans s ON s.report = m.report AND s.pid = m.pid
GROUP BY m.rank
