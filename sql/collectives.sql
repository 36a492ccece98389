-- The normalized `collectives` table of a whole job (all its reports).
-- Inputs: calls (per-report rows from a source, with report and pid), proc_ranks
-- (report, pid -> rank, local_rank, host; chosen in nsyscomm/api.py).
-- Calls without the wrapper's (group, seq) get seq = their order among the rank's calls
-- of the same op, and a group size inferred from how many ranks share that seq.
-- logical_id names one logical collective: the same (group, op, seq) on every rank, and for
-- point-to-point calls also the same pair of ranks (their seq counts per pair).
WITH ranked AS (
    SELECT c.*, m.rank, m.local_rank, m.host,
           CASE WHEN c.seq IS NOT NULL THEN c.seq
                ELSE row_number() OVER (PARTITION BY m.rank, c.op, (c.seq IS NULL)
                                        ORDER BY coalesce(c.gpu_start, c.cpu_start), c.cpu_start) - 1
           END AS seq_filled,
           CASE WHEN c.op IN ('send', 'recv') AND c.peer IS NOT NULL AND m.rank IS NOT NULL
                THEN least(m.rank, c.peer) || '-' || greatest(m.rank, c.peer) END AS pair
    FROM calls c
    LEFT JOIN proc_ranks m ON m.report = c.report AND m.pid = c.pid
)
SELECT
    report, rank, local_rank, host, pid, tid, op, api, bytes, dtype, numel, "group",
    coalesce(group_size, count(*) OVER (PARTITION BY "group", op, seq_filled, (seq IS NULL)))::INTEGER AS group_size,
    group_ranks,
    seq_filled AS seq,
    caller, step, cpu_start, cpu_end, gpu_start, gpu_end, stream, device,
    coalesce(gpu_end - gpu_start, cpu_end - cpu_start) AS duration_ns,
    source, kernel, algo, proto, kernels, kernel_ns, peer, pair, busy_at_start, busy_at_end,
    dense_rank() OVER (ORDER BY "group" NULLS FIRST, pair NULLS FIRST, op, seq_filled) AS logical_id
FROM ranked
ORDER BY rank, coalesce(gpu_start, cpu_start), cpu_start
