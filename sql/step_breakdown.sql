-- Per step, a rank's time in collectives split into waiting and exposed transfer, averaged over
-- the ranks (the HTML report's waterfall beside the what-if: compute is the rest of the step).
-- wait: the time a rank was blocked waiting for the others, each interval once: a call's wait is
-- the start of its execution (duration minus its logical collective's fastest, the transfer
-- itself), and calls waiting together (several queued on one late arrival) count once;
-- exposed transfer: that transfer minus the compute-kernel busy time on the device while the call
-- ran (GPU calls); a CPU call's transfer is all exposed, an asynchronous one's only
-- the part of its execution during its caller's wait for it (wait_start..wait_end), where that
-- wait was seen. Setup calls and calls that never completed are left out.
-- Inputs: collectives, logical_collectives.
WITH c AS (
    SELECT c.rank, c.step,
           c.exec_start AS s,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we,
           CASE WHEN c.gpu_start IS NOT NULL
                THEN greatest(l.latency_ns - coalesce(c.busy_at_end - c.busy_at_start, 0), 0)
                -- an asynchronous call the caller waited for: exposed only while it ran and the
                -- caller waited (a DDP bucket done before backward's end was hidden by it)
                WHEN c.wait_end IS NOT NULL
                THEN least(l.latency_ns, greatest(least(c.exec_end, c.wait_end)
                                                  - greatest(c.exec_start, c.wait_start), 0))
                ELSE l.latency_ns END AS exposed_ns
    FROM collectives c JOIN logical_collectives l USING (logical_id)
    WHERE c.step IS NOT NULL AND NOT c.setup AND c.completed
),
-- each wait's part not covered by the rank's waits in the step that began before it
parts AS (
    SELECT *, greatest(0, we - greatest(s, coalesce(max(we) OVER w, s))) AS wait_ns
    FROM c
    WINDOW w AS (PARTITION BY step, rank ORDER BY s, we ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
)
SELECT step, count(DISTINCT rank) AS ranks,
       sum(wait_ns) / count(DISTINCT rank) / 1e6    AS wait_ms,
       sum(exposed_ns) / count(DISTINCT rank) / 1e6 AS exposed_ms
FROM parts GROUP BY step ORDER BY step
