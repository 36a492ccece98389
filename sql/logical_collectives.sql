-- One row per logical collective: the calls of one communicator's seq-th operation on its ranks.
-- latency = the fastest rank's duration (the transfer itself, without waiting for late ranks).
-- Input: collectives.
SELECT
    "group", op, seq,
    min(bytes)                                  AS bytes,
    min(group_size)                             AS group_size,
    min(caller)                                 AS caller,
    min(step)                                   AS step,
    count(*)                                    AS participants,
    min(duration_ns)                            AS latency_ns,
    min(coalesce(gpu_start, cpu_start))         AS first_arrival,
    max(coalesce(gpu_start, cpu_start))         AS last_arrival,
    -- tie on arrival: the smallest rank is named
    arg_max(rank, (coalesce(gpu_start, cpu_start), -rank)) AS last_rank
FROM collectives
GROUP BY "group", op, seq
