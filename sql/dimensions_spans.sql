-- The rows of sql/dimensions.sql, whose parts of each rank's unions on each communicator
-- nsyscomm/analyses/spans.py adds (comm_ns over (s, e), wait_ns over (s, we), per communicator
-- and rank): the calls on a known communicator, not setting up their communicator, that
-- completed. Inputs: collectives, logical_collectives.
SELECT c."group",                                                 -- the call's communicator
       c.rank,                                                    -- its rank
       c.op,                                                      -- its op
       c.exec_start AS s,                                         -- its execution's start (ns)
       c.exec_end AS e,                                           -- its execution's end (ns)
       c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we,  -- the end of its waiting
       -- its duration minus the compute-kernel busy time on its device while it ran (GPU calls)
       CASE WHEN c.gpu_start IS NOT NULL
            THEN c.duration_ns - coalesce(c.busy_at_end - c.busy_at_start, 0) END AS exposed_ns,
       c.group_size,                                              -- its communicator's size
       c.group_ranks                                              -- its communicator's ranks, as recorded
FROM collectives c JOIN logical_collectives l USING (logical_id)
WHERE c."group" IS NOT NULL AND NOT c.setup AND c.completed AND c.exec_start IS NOT NULL
