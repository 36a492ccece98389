-- NCCL Inspector's Prometheus buckets of the job (its .prom files): per op, communicator size,
-- size bucket and algorithm/protocol, over the GPUs that reported it, the bus bandwidth's
-- geometric mean (as the plugin averages a bucket) and the mean execution time.
-- Input: inspector_buckets (one row per GPU, communicator and bucket of each file).
SELECT op, api, nranks, n_nodes, message_size, min(bucket_lo) AS bucket_lo, algo_proto,
       count(*) AS gpus,                                        -- rows (GPUs x communicators) averaged
       exp(avg(ln(busbw_gbs)) FILTER (WHERE busbw_gbs > 0)) AS busbw_gbs, -- geometric mean, GB/s
       min(busbw_gbs) FILTER (WHERE busbw_gbs > 0) AS min_busbw_gbs,    -- the slowest GPU's, GB/s
       avg(exec_us) AS exec_us                                  -- mean execution time, microseconds
FROM inspector_buckets
GROUP BY op, api, nranks, n_nodes, message_size, algo_proto
ORDER BY op, bucket_lo, nranks, algo_proto
