-- Compute busy time on a call's process and device before its GPU start and end (what
-- nsyscomm/ingest/busy.py's busy_at_edges computes in numpy), from compute_islands
-- (sql/compute_islands.sql): the last island starting at or before the edge gives
-- before + min(edge, its end) - its start; no such island, 0.
-- Input: call_edges (i: the call's row, pid, device, gpu_start, gpu_end; both edges known).
WITH at_start AS (
    SELECT e.i, coalesce(s.before + least(e.gpu_start, s.i_end) - s.i_start, 0) AS busy
    FROM call_edges e ASOF LEFT JOIN compute_islands s
      ON s.pid = e.pid AND s.device = e.device AND e.gpu_start >= s.i_start
),
at_end AS (
    SELECT e.i, coalesce(s.before + least(e.gpu_end, s.i_end) - s.i_start, 0) AS busy
    FROM call_edges e ASOF LEFT JOIN compute_islands s
      ON s.pid = e.pid AND s.device = e.device AND e.gpu_end >= s.i_start
)
SELECT a.i, a.busy AS busy_at_start, b.busy AS busy_at_end
FROM at_start a JOIN at_end b ON a.i = b.i
ORDER BY a.i
