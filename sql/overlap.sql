-- Exposed communication per rank, and per rank and step: wall time during which some NCCL
-- kernel of the rank runs and no compute kernel on the same device does. Calls on several
-- streams may overlap each other, so communication is first merged into busy islands too.
-- CPU-synchronous calls (no kernel) have nothing to hide behind and are left out.
-- Inputs: collectives, compute_islands (report, pid, device, start, end).
WITH comm AS (
    SELECT rank, report, pid, device, step, gpu_start AS s, gpu_end AS e
    FROM collectives WHERE gpu_start IS NOT NULL
),
scoped AS (
    SELECT 'rank' AS scope, rank, NULL::BIGINT AS step, report, pid, device, s, e FROM comm
    UNION ALL
    SELECT 'step', rank, step, report, pid, device, s, e FROM comm
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
    SELECT row_number() OVER () AS iid, scope, rank, step, report, pid, device,
           min(s) AS s, max(e) AS e, count(*) AS calls
    FROM g GROUP BY scope, rank, step, report, pid, device, isl
),
-- Compute islands of one (report, pid, device) are disjoint, so the compute time hidden under
-- [s, e] is B(e) - B(s), with B(t) the compute busy time before t: the busy time of the islands
-- before the last island starting at or before t, plus that island's part before t. B is found
-- with an ASOF join (sort-merge; a range join per device would compare every pair).
ci AS (
    SELECT report, pid, coalesce(device, -1) AS dev, start, "end",
           coalesce(sum("end" - start) OVER (PARTITION BY report, pid, coalesce(device, -1) ORDER BY start
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
    FROM compute_islands
),
points AS (
    SELECT iid, report, pid, coalesce(device, -1) AS dev, s AS t, -1 AS sign FROM islands
    UNION ALL
    SELECT iid, report, pid, coalesce(device, -1) AS dev, e AS t, 1 AS sign FROM islands
),
hidden AS (
    SELECT p.iid, sum(p.sign * coalesce(i.before + least(p.t, i."end") - i.start, 0)) AS ns
    FROM points p
    ASOF LEFT JOIN ci i
      ON i.report = p.report AND i.pid = p.pid AND i.dev = p.dev AND p.t >= i.start
    GROUP BY p.iid
)
SELECT c.scope, c.rank, c.step,
       sum(c.calls)                               AS calls,
       sum(c.e - c.s)                             AS comm_busy_ns,
       sum(c.e - c.s - coalesce(h.ns, 0))         AS exposed_ns
FROM islands c LEFT JOIN hidden h ON h.iid = c.iid
GROUP BY c.scope, c.rank, c.step
ORDER BY c.scope, c.rank, c.step NULLS FIRST
