-- The logical collectives that set up their communicator (NCCL initializes a communicator
-- lazily, inside its first collective: the call then lasts the whole initialization). Such a
-- call is setup, not communication, and is left out of the statistics (docs/architecture.md,
-- "Setup calls and warm-up steps"). A logical collective is setup when
--   a. NCCL's own init ranges (ncclCommInitRank*, ncclCommSplit, ...: init_ns, read by the
--      ingest) lie inside it on some rank, or
--   b. it is the first on its communicator (group, and pair for point-to-point), it ran on a
--      device (a backend that initializes lazily, as NCCL: gloo and MPI connect in
--      init_process_group, and their first call's jitter is no setup), and its time on its
--      fastest rank -- host or device, the longer (NCCL initializes on the host, before the
--      kernel) -- is at least $min_ns and over $factor times the median of the later calls on
--      that communicator at least as large: of its op when there are $min_later of them, else of
--      any op (a larger message never takes less; the first call is often a tiny one). $min_ns
--      is far above any first call's noise and below any NCCL initialization, so the rule does
--      not flip between identical runs.
-- Input: logical_collectives (took_ns, init_ns), collectives (gpu_start, device, kernels).
-- Out: logical_id, how ('nccl_init' | 'first_call').
WITH lc AS (
    SELECT logical_id, "group" AS grp, pair, op, coalesce(bytes, 0) AS bytes, first_arrival, took_ns,
           coalesce(init_ns, 0) AS init_ns
    FROM logical_collectives
),
-- (a hash aggregate, not a window over every collective: the first per communicator)
firsts AS (
    SELECT arg_min(lc, (first_arrival, logical_id)) AS f FROM lc GROUP BY grp, pair
),
on_device AS (
    SELECT DISTINCT logical_id FROM collectives
    WHERE gpu_start IS NOT NULL OR device IS NOT NULL OR coalesce(kernels, 0) > 0
),
later AS (
    SELECT f.f.logical_id AS logical_id,
           count(*) FILTER (WHERE o.op = f.f.op)          AS same_op,
           median(o.took_ns) FILTER (WHERE o.op = f.f.op) AS same_op_ns,
           median(o.took_ns)                              AS any_op_ns
    FROM firsts f
    JOIN lc o
      ON o.grp IS NOT DISTINCT FROM f.f.grp AND o.pair IS NOT DISTINCT FROM f.f.pair
     AND o.logical_id <> f.f.logical_id AND o.bytes >= f.f.bytes
    GROUP BY f.f.logical_id
)
SELECT logical_id, 'nccl_init' AS how FROM lc WHERE init_ns > 0
UNION ALL
SELECT f.f.logical_id, 'first_call'
FROM firsts f JOIN later l ON l.logical_id = f.f.logical_id
WHERE f.f.init_ns = 0 AND f.f.took_ns >= $min_ns AND f.f.logical_id IN (SELECT logical_id FROM on_device)
  AND f.f.took_ns > $factor * CASE WHEN l.same_op >= $min_later THEN l.same_op_ns ELSE l.any_op_ns END
