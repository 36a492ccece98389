-- The collectives that are every participant's first call of the job (logical_collectives.startup,
-- nsyscomm.combine.setup.mark_startup): the arrival skew there is the processes' start-up.
-- Input: logical_collectives.
SELECT op, "group", step, participants, last_rank, (last_arrival - first_arrival) / 1e6 AS skew_ms
FROM logical_collectives
WHERE startup
ORDER BY first_arrival, op, "group" NULLS FIRST
