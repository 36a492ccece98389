-- The steps of a capture window (`nsyscomm run --steps A:B`) that its edges cut on some rank:
-- nsys starts and stops one collection for the whole job, at the first rank's window opening and
-- the last one's closing, so a rank whose window opened after the others' or closed while the
-- capture stopped has part of its edge step only. Such a step holds a collective seen on fewer
-- ranks than its group (a message without one of its sides); only the job's first and last steps
-- are looked at (an incomplete collective inside the window is no edge: a hang, a missing rank),
-- and never a step where a call never completed (a hang at the last step).
-- Input: collectives (step, logical_id, op, group_size, rank).
-- Out: step, edge ('first' | 'last'), calls (its calls on every rank), short (the ranks with
-- fewer calls in it than the rank with most, 0 for a rank with none: where the edge cut it).
WITH edges AS (
    SELECT min(step) AS lo, max(step) AS hi FROM collectives WHERE step IS NOT NULL
),
incomplete AS (
    SELECT c.logical_id, any_value(c.step) AS step
    FROM collectives c, edges e
    WHERE c.step IN (e.lo, e.hi)
    GROUP BY c.logical_id
    HAVING count(*) < CASE WHEN max(c.op) IN ('send', 'recv') THEN 2 ELSE max(c.group_size) END
),
cut AS (
    SELECT DISTINCT s.step, CASE WHEN s.step = e.lo THEN 'first' ELSE 'last' END AS edge
    FROM incomplete s, edges e
    -- a step holding a call that never completed (its range has no end: the ingest ends it where
    -- it starts) is a hang, which the hang analysis reads, not the capture's edge
    WHERE NOT EXISTS (SELECT 1 FROM collectives c WHERE c.step = s.step AND (c.cpu_end IS NULL OR c.cpu_end <= c.cpu_start))
),
per_rank AS (
    SELECT k.step, r.rank, count(c.rank) AS n
    FROM cut k CROSS JOIN (SELECT DISTINCT rank FROM collectives) r
    LEFT JOIN collectives c ON c.step = k.step AND c.rank = r.rank
    GROUP BY k.step, r.rank
)
SELECT k.step, k.edge, sum(p.n) AS calls,
       list(p.rank ORDER BY p.rank) FILTER (WHERE p.n < (SELECT max(q.n) FROM per_rank q WHERE q.step = k.step)) AS short
FROM cut k JOIN per_rank p ON p.step = k.step
GROUP BY k.step, k.edge
ORDER BY k.step
