-- The operations of the what-if replay (nsyscomm.analyses.whatif): every call in its rank's time
-- order, with the group that synchronises it across ranks (sync_id: the logical collective; a send
-- and its receive share one, sql/collectives.sql) and the part of it no
-- compute hides (exposed_ns: NULL without kernel timing) and whether its collective is its ranks'
-- first (startup: their skew there is start-up, no straggler's) or a shadow of a rank that joined
-- early under torch.distributed.algorithms.Join (shadow: its skew is the joined rank's absence), and
-- what its rank's host did meanwhile (issue_ns, wait_start_ns, wait_end_ns, queue, queued_ns: a call
-- timed on the host is modelled as its issue, its execution and the caller's wait, docs/whatif.md).
-- Inputs: collectives, logical_collectives.
SELECT
    rank,
    step,
    op,
    bytes,
    coalesce(caller, '')                                   AS caller,
    coalesce(group_size, 1)                                AS group_size,
    logical_id                                             AS sync_id,
    exec_start                                             AS start_ns,
    exec_end                                               AS end_ns,
    cpu_start                                              AS issue_ns,   -- the host enqueued it
    wait_start                                             AS wait_start_ns,  -- the caller's wait for it
    wait_end                                               AS wait_end_ns,    -- and its return
    "group"                                                AS queue,      -- gloo runs a group's calls in order
    queued_ns,                                             -- the time it waited behind them
    gpu_start IS NOT NULL                                  AS device_timed,  -- kernels time it (NCCL)
    -- (NCCL's init, which a call's execution span counts, is no transfer compute could hide)
    CASE WHEN busy_at_end IS NOT NULL AND busy_at_start IS NOT NULL
         THEN greatest(0, (exec_end - exec_start - coalesce(init_ns, 0)) - (busy_at_end - busy_at_start))
         END                                               AS exposed_ns,
    -- (a few collectives, at most one per rank: a semi-join with a small set)
    logical_id IN (SELECT logical_id FROM logical_collectives WHERE startup) AS startup,
    -- (a rank that joined under Join: every collective after it joined, a semi-join too)
    logical_id IN (SELECT logical_id FROM logical_collectives WHERE shadow) AS shadow,
    joined IS NOT NULL                                     AS joined  -- the call is a joined rank's shadow
FROM collectives
WHERE exec_start IS NOT NULL AND exec_end IS NOT NULL
-- calls that tie on all four (two communicators' at one instant) in one order every run
ORDER BY rank, start_ns, end_ns, seq, "group" NULLS FIRST, op, sync_id
