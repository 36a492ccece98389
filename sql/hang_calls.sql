-- Every collective call each rank entered, for the hang diagnosis (nsyscomm.analyses.hang): the
-- reports' calls and hang_records: the flight records' (source 'record', which know calls
-- entered and never finished even when nsys never saw their NVTX range close) and the Flight
-- Recorder dumps' (source 'flight_recorder', with their state). A call in both is taken from
-- hang_records. Point-to-point
-- calls are left out: their seq counts per pair, not per communicator.
-- Inputs: collectives, hang_records.
SELECT * EXCLUDE (pick, from_record) FROM (
    SELECT *, row_number() OVER (PARTITION BY rank, "group", seq
                                 ORDER BY from_record DESC, finished DESC) AS pick
    FROM (
        SELECT rank, "group", group_size, coalesce(group_ranks, '') AS group_ranks, seq, op, bytes, dtype,
               caller, cpu_end IS NOT NULL AS finished, cpu_start AS t_enter, source, false AS from_record
        FROM collectives
        WHERE op NOT IN ('send', 'recv') AND seq IS NOT NULL AND rank IS NOT NULL
        UNION ALL BY NAME
        SELECT rank, "group", group_size, group_ranks, seq, op, bytes, dtype, caller, finished, t_enter,
               source, true AS from_record
        FROM hang_records
    )
) WHERE pick = 1
