-- Every collective call each rank entered, for the hang diagnosis (nsyscomm.analyses.hang): the
-- reports' calls and hang_records: the flight records' (source 'record', which know calls
-- entered and never finished even when nsys never saw their NVTX range close) and the Flight
-- Recorder dumps' (source 'flight_recorder', with their state). A call in both is taken from
-- hang_records (an anti-join, not a window over every call: cheap when there are no records;
-- a join, not NOT EXISTS, whose correlated form DuckDB plans as a delim join that holds every
-- call's columns before it looks the records up).
-- Point-to-point calls are left out: their seq counts per pair, not per communicator.
-- Inputs: collectives, hang_records.
WITH rec AS (
    SELECT rank, "group", group_size, group_ranks, seq, op, bytes, dtype, caller, finished, t_enter, source,
           row_number() OVER (PARTITION BY rank, "group", seq
                              ORDER BY finished DESC, source, t_enter NULLS LAST, op) AS pick
    FROM hang_records
)
SELECT rank, "group", group_size, coalesce(group_ranks, '') AS group_ranks, seq, op, bytes, dtype,
       caller, cpu_end IS NOT NULL AS finished, cpu_start AS t_enter, source
FROM collectives c
ANTI JOIN hang_records r ON r.rank = c.rank AND r."group" = c."group" AND r.seq = c.seq
WHERE op NOT IN ('send', 'recv') AND seq IS NOT NULL AND rank IS NOT NULL
UNION ALL
SELECT rank, "group", group_size, group_ranks, seq, op, bytes, dtype, caller, finished, t_enter, source
FROM rec WHERE pick = 1
