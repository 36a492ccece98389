-- Per report (other than the reference $ref): the median of (reference end - report end) over
-- the logical collectives both saw, i.e. how far the report's clock is behind; and the residual
-- (median absolute deviation around that median) that alignment cannot remove. Input: collectives.
WITH ends AS (
    SELECT report, logical_id, exec_end AS e FROM collectives
),
pairs AS (
    SELECT b.report, a.e - b.e AS d
    FROM ends a JOIN ends b
      ON a.logical_id = b.logical_id
    WHERE a.report = $ref AND b.report <> $ref
),
med AS (
    SELECT report, median(d) AS delta, count(*) AS n FROM pairs GROUP BY report
)
SELECT m.report, m.delta, median(abs(p.d - m.delta)) AS residual, m.n
FROM med m JOIN pairs p ON p.report = m.report
GROUP BY m.report, m.delta, m.n
ORDER BY m.report
