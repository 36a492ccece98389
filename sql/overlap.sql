-- Exposed communication per rank, and per rank and step: wall time during which some NCCL
-- kernel of the rank runs and no compute kernel on the same device does; calls on several
-- streams may overlap each other, so communication time is the length of their union.
-- CPU-synchronous calls (no kernel) have nothing to hide behind and are left out.
-- Input: overlap_parts (nsyscomm/overlap.py): per call that ran kernels, its rank, step, and for
-- each scope the disjoint part of the union it adds (comm_*_ns) and what of that part no
-- compute kernel hides (exposed_*_ns).
SELECT 'rank' AS scope, rank, NULL::BIGINT AS step,
       count(*) AS calls, sum(comm_rank_ns) AS comm_busy_ns, sum(exposed_rank_ns) AS exposed_ns
FROM overlap_parts GROUP BY rank
UNION ALL
SELECT 'step', rank, step, count(*), sum(comm_step_ns), sum(exposed_step_ns)
FROM overlap_parts GROUP BY rank, step
ORDER BY scope, rank, step NULLS FIRST
