-- NCCL's communicator initialization inside each call of one nsys report: NCCL's own init
-- ranges ($names: ncclCommInitRank*, ncclCommSplit, ...; NCCL >= 2.19 marks them) on the call's
-- thread within its host range, summed. NCCL initializes a communicator lazily, inside its
-- first collective (sql/setup_calls.sql). Inputs: call_edges (idx, pid, tid, cpu_start,
-- cpu_end), src_ranges.
WITH init AS (
    SELECT (globalTid >> 24) & 16777215 AS pid, globalTid & 16777215 AS tid, start, "end"
    FROM src_ranges WHERE list_contains($names, name) AND "end" IS NOT NULL
)
SELECT c.idx, sum(i."end" - i.start)::BIGINT AS init_ns
FROM call_edges c JOIN init i ON i.pid = c.pid AND i.tid = c.tid
WHERE i.start >= c.cpu_start AND i."end" <= c.cpu_end
GROUP BY c.idx
