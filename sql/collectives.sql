-- The normalized `collectives` table of a whole job (all its reports): each call's own columns
-- (calls_ranked: the call with its rank and pair) and its number and span (call_spans).
-- logical_id names one logical collective: the same (group, op, seq) on every rank, or for a
-- point-to-point call its message (sender, receiver, msg; sql/call_spans.sql).
-- Stored unsorted: sorting the wide rows cost as much as the rest of the query; readers that
-- list calls order them (nsyscomm.api.ORDERED).
SELECT
    c.report, c.rank, c.local_rank, c.host, c.pid, c.tid, c.op, c.api, c.bytes, c.dtype, c.numel, c."group",
    t.group_size::INTEGER AS group_size, c.group_ranks, t.seq,
    c.caller, c.step, c.cpu_start, c.cpu_end, c.gpu_start, c.gpu_end, c.stream, c.device,
    t.x_start AS exec_start, t.x_end AS exec_end, t.x_end - t.x_start AS duration_ns,
    -- (least() skips a NULL: a call with nothing ahead of it waited in no queue)
    CASE WHEN t.queue_free IS NULL THEN 0 ELSE greatest(0, least(t.x_start, t.queue_free) - c.cpu_start) END::BIGINT
        AS queued_ns,
    c.source, c.kernel, c.algo, c.proto, c.kernels, c.kernel_ns, c.peer, c.pair, c.busy_at_start, c.busy_at_end,
    c.init_ns,
    false AS setup,  -- set by combine (sql/setup_calls.sql), once the job's calls are all here
    c.wait_start, c.wait_end,
    -- no end seen, or the source says it never completed (more from the flight records: combine)
    t.x_end IS NOT NULL AND coalesce(c.completed, true) AS completed,
    c.joined,  -- the step its rank joined at under Join: a shadow call (nsyscomm/capture/join_ranks.py)
    -- a 64-bit hash of the key: no global sort for an id (collisions: ~1e-9 for 200k collectives)
    CASE WHEN c.pair IS NULL THEN (hash(c."group", c.pair, c.op, t.seq) >> 1)::BIGINT
         ELSE (hash(c."group", 'p2p', t.sender, t.receiver, t.msg) >> 1)::BIGINT END AS logical_id
-- (a LEFT JOIN builds its right side, the narrow one: combine/calls.py disables the optimizer
-- that would swap them)
FROM calls_ranked c
LEFT JOIN call_spans t USING (call_id)
-- the calls numbered from $lo to before $hi: combine/calls.py writes a large job's rows a slice
-- at a time
WHERE c.call_id >= $lo AND c.call_id < $hi
