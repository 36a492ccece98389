-- The logical collectives set aside as their communicator's setup (sql/setup_calls.sql), in
-- time order: what, where, on how many ranks, how it was told (how), how long the call took on
-- its slowest rank (host or device without the init its execution span counts, the longer:
-- took_ms) and NCCL's own init ranges inside it
-- (init_ms, NULL when NCCL did not mark them). Inputs: collectives, logical_collectives, setup_ids.
SELECT l.op, l.bytes, l."group", l.step, l.caller, l.participants,
       any_value(s.how)                                                        AS how,
       max(greatest(c.duration_ns - coalesce(c.init_ns, 0), coalesce(c.cpu_end - c.cpu_start, 0))) / 1e6 AS took_ms,
       max(c.init_ns) / 1e6                                                    AS init_ms
FROM collectives c
JOIN logical_collectives l USING (logical_id)
JOIN setup_ids s USING (logical_id)
WHERE c.setup
GROUP BY l.logical_id, l.op, l.bytes, l."group", l.step, l.caller, l.participants, l.first_arrival
ORDER BY l.first_arrival, l.op, l."group" NULLS FIRST
