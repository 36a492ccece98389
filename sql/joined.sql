-- The ranks that joined early under torch.distributed.algorithms.Join (uneven inputs): a rank that
-- ran out of inputs issues shadow collectives inside Join's exit to match the ranks still
-- training (collectives.joined: the step at which it joined; nsyscomm/capture/join_ranks.py). A
-- rank is listed when some of its joined calls met a rank that had not joined (the last rank to
-- join meets only joined ranks there). Its waiting in them is its absence, not lateness:
-- logical_collectives.shadow leaves them out of late arrivals, skew and the what-if's savings.
-- Inputs: collectives, logical_collectives.
-- Out: rank, step (its step when it joined), shadow_calls (its calls after, matching others'),
-- first_step, last_step (the others' steps they match), shadow_ms (their execution time summed).
WITH early AS (
    SELECT c.rank, c.joined, c.step, c.duration_ns
    FROM collectives c
    WHERE c.joined IS NOT NULL AND c.logical_id IN (
        SELECT logical_id FROM collectives GROUP BY logical_id HAVING bool_or(joined IS NULL)
    )
)
SELECT rank,
       min(joined)                          AS step,
       count(*)                             AS shadow_calls,
       min(step)                            AS first_step,
       max(step)                            AS last_step,
       sum(coalesce(duration_ns, 0)) / 1e6  AS shadow_ms
FROM early
GROUP BY rank
ORDER BY rank
