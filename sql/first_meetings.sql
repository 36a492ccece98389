-- The job's first meetings: the logical collectives that are every participant's first call of
-- the capture (two participants or more). Their arrival skew is start-up only as far as when the
-- ranks joined the capture explains it (docs/architecture.md, "Setup calls and warm-up steps"):
-- a rank is ready at its first recorded event (rank_spans.first_ns: its process start when the
-- capture holds it, the window's opening in a capture window); its time to arrive is its arrival
-- minus that; the part of the skew start-up does not explain is how much longer the last rank
-- took to arrive than the quickest participant, at most the skew itself. Without ready times
-- nothing explains the skew: all of it is lateness. A collective of a step after the first (the
-- wrapper's step, or torch.profiler's ProfilerStep#N, N > 0) is in a capture window: the ranks
-- had met before it, outside the capture, so it is no first meeting at all.
-- Inputs: collectives, logical_collectives, rank_spans. Out: logical_id, skew_ns, unexplained_ns.
WITH firsts AS (
    SELECT rank, arg_min(logical_id, (exec_start, cpu_start, logical_id)) AS logical_id
    FROM collectives WHERE rank IS NOT NULL GROUP BY rank
),
meet AS (
    SELECT f.logical_id
    FROM firsts f JOIN logical_collectives l USING (logical_id)
    GROUP BY f.logical_id, l.participants, l.step
    HAVING l.participants >= 2 AND count(*) = l.participants AND coalesce(l.step, 0) <= 0
),
took AS (
    SELECT c.logical_id, c.rank, c.exec_start - s.first_ns AS to_arrive
    FROM collectives c JOIN meet USING (logical_id) LEFT JOIN rank_spans s USING (rank)
)
SELECT l.logical_id,
       any_value(l.last_arrival - l.first_arrival) AS skew_ns,
       greatest(0, least(any_value(l.last_arrival - l.first_arrival),
                         coalesce(max(t.to_arrive) FILTER (WHERE t.rank = l.last_rank) - min(t.to_arrive),
                                  any_value(l.last_arrival - l.first_arrival)))) AS unexplained_ns
FROM logical_collectives l JOIN took t USING (logical_id)
GROUP BY l.logical_id
