-- The device copies (CUPTI_ACTIVITY_KIND_MEMCPY) of the calls of one nsys report that ran no
-- NCCL kernel. On a one-rank communicator NCCL launches no kernel: it copies locally on its
-- stream (an out-of-place call) or does nothing at all (in place). A copy belongs to a call when
-- its launching runtime call (the same correlationId in the same process: ids restart in every
-- process) ran inside the call's host range on the same thread, as a kernel does
-- (sql/calls_nsys.sql); copies launched inside NCCL's communicator initialization ($names) are
-- its setup, not the call's transfer. Inputs: call_edges (idx, pid, tid, cpu_start, cpu_end),
-- r.CUPTI_ACTIVITY_KIND_MEMCPY, r.CUPTI_ACTIVITY_KIND_RUNTIME, src_ranges.
WITH copies AS (
    SELECT m.start, m."end", m.streamId AS stream, m.deviceId AS device,
           (l.globalTid >> 24) & 16777215 AS pid, l.globalTid & 16777215 AS tid, l.start AS launch
    FROM r.CUPTI_ACTIVITY_KIND_MEMCPY m
    JOIN r.CUPTI_ACTIVITY_KIND_RUNTIME l
      ON l.correlationId = m.correlationId AND (l.globalTid >> 24) = (m.globalPid >> 24)
    WHERE m.start IS NOT NULL AND m."end" IS NOT NULL AND l.globalTid IS NOT NULL
),
init AS (
    SELECT (globalTid >> 24) & 16777215 AS pid, globalTid & 16777215 AS tid, start, "end"
    FROM src_ranges WHERE list_contains($names, name) AND "end" IS NOT NULL
),
owned AS (
    SELECT c.idx, k.*
    FROM call_edges c JOIN copies k ON k.pid = c.pid AND k.tid = c.tid
    WHERE k.launch BETWEEN c.cpu_start AND c.cpu_end
      AND NOT EXISTS (SELECT 1 FROM init i WHERE i.pid = k.pid AND i.tid = k.tid AND k.launch BETWEEN i.start AND i."end")
)
SELECT idx,
       min(start)                       AS gpu_start,
       max("end")                       AS gpu_end,
       arg_min(stream, start)::BIGINT   AS stream,
       arg_min(device, start)::INTEGER  AS device,
       count(*)                         AS copies
FROM owned GROUP BY idx
