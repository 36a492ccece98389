-- Exposed communication per rank, and per rank and step: wall time during which some NCCL
-- kernel of the rank runs and no compute kernel on the same device does. Calls on several
-- streams may overlap each other, so communication time is the length of their union.
-- CPU-synchronous calls (no kernel) have nothing to hide behind and are left out.
-- One pass in (s, e) order per process (its rank follows) and device: each call adds to the union only the part
-- past the latest end before it, [max(s, prev_e), e]; these parts are disjoint and cover the
-- union. Compute hidden under a part [a, e] is B(e) - B(a), B(t) the compute busy time before t
-- on the device (nsyscomm/ingest/busy.py): a is the call's own gpu_start or the gpu_end of the
-- call that ended latest before it, where the sources evaluated B (busy_at_start, busy_at_end).
-- Input: collectives.
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
    SELECT *,
           max(e) OVER w                     AS prev_e,
           -- B at that latest end: B never decreases, so it is the largest busy_at_end before
           -- (arg_max(busy_at_end, e) gives the same, 10% slower)
           max(busy_at_end) OVER w           AS prev_busy
    FROM scoped
    WINDOW w AS (PARTITION BY scope, step, report, pid, device ORDER BY s, e
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
parts AS (
    SELECT scope, rank, step,
           CASE WHEN prev_e IS NULL OR s >= prev_e THEN e - s
                WHEN e > prev_e THEN e - prev_e ELSE 0 END                         AS comm_ns,
           CASE WHEN prev_e IS NULL OR s >= prev_e THEN busy_at_end - busy_at_start
                WHEN e > prev_e THEN busy_at_end - prev_busy ELSE 0 END            AS hidden_ns
    FROM m
)
SELECT scope, rank, step,
       count(*)                                   AS calls,
       sum(comm_ns)                               AS comm_busy_ns,
       sum(comm_ns - coalesce(hidden_ns, 0))      AS exposed_ns
FROM parts
GROUP BY scope, rank, step
ORDER BY scope, rank, step NULLS FIRST
