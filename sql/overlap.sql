-- Exposed communication per rank, and per rank and step: wall time during which some NCCL
-- kernel of the rank runs and no compute kernel on the same device does; calls on several
-- streams may overlap each other, so communication time is the length of their union. A call
-- without kernels (gloo, MPI) is exposed while its caller waits for it: an asynchronous one
-- (DDP's buckets) during the part of its execution inside its wait, a synchronous one whole; an
-- asynchronous one whose wait was not seen is left out (nsyscomm/analyses/overlap.py).
-- Input: overlap_parts (nsyscomm/analyses/overlap.py): per rank and step (a row per group of
-- reports and per kind of call it took them in), the calls counted (calls), and for each scope
-- the sums of the disjoint part of the union each call adds (comm_*_ns) and of what of that part
-- is exposed (exposed_*_ns).
SELECT 'rank' AS scope, rank, NULL::BIGINT AS step,
       sum(calls)::BIGINT AS calls, sum(comm_rank_ns) AS comm_busy_ns, sum(exposed_rank_ns) AS exposed_ns
FROM overlap_parts GROUP BY rank
UNION ALL
SELECT 'step', rank, step, sum(calls)::BIGINT, sum(comm_step_ns), sum(exposed_step_ns)
FROM overlap_parts GROUP BY rank, step
ORDER BY scope, rank, step NULLS FIRST
