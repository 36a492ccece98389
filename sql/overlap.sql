-- Exposed communication per rank, and per rank and step: wall time during which some NCCL
-- kernel of the rank runs and no compute kernel on the same device does. Calls on several
-- streams may overlap each other, so communication is first merged into busy islands.
-- CPU-synchronous calls (no kernel) have nothing to hide behind and are left out.
-- Compute hidden under an island [s, e] is B(e) - B(s), B(t) the compute busy time before t on
-- the device (nsyscomm/ingest/busy.py); s and e are some call's gpu_start and gpu_end, where
-- the sources evaluated B (busy_at_start, busy_at_end). Input: collectives.
WITH comm AS (
    SELECT rank, report, pid, device, step, gpu_start AS s, gpu_end AS e, busy_at_start, busy_at_end
    FROM collectives WHERE gpu_start IS NOT NULL
),
scoped AS (
    SELECT 'rank' AS scope, rank, NULL::BIGINT AS step, report, pid, device, s, e, busy_at_start, busy_at_end
    FROM comm
    UNION ALL
    SELECT 'step', rank, step, report, pid, device, s, e, busy_at_start, busy_at_end FROM comm
),
m AS (
    SELECT *, max(e) OVER (PARTITION BY scope, rank, step, report, pid, device ORDER BY s, e
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_e
    FROM scoped
),
g AS (
    SELECT *, sum(CASE WHEN prev_e IS NULL OR s > prev_e THEN 1 ELSE 0 END)
                  OVER (PARTITION BY scope, rank, step, report, pid, device ORDER BY s, e
                        ROWS UNBOUNDED PRECEDING) AS isl
    FROM m
),
islands AS (
    SELECT scope, rank, step,
           min(s) AS s, max(e) AS e, count(*) AS calls,
           arg_max(busy_at_end, e) - arg_min(busy_at_start, s) AS hidden_ns
    FROM g GROUP BY scope, rank, step, report, pid, device, isl
)
SELECT scope, rank, step,
       sum(calls)                                 AS calls,
       sum(e - s)                                 AS comm_busy_ns,
       sum(e - s - coalesce(hidden_ns, 0))        AS exposed_ns
FROM islands
GROUP BY scope, rank, step
ORDER BY scope, rank, step NULLS FIRST
