-- Link throughput during each report's collectives (nsys --gpu-metrics-devices), per report.
-- Inputs: link_samples(device, metric, t0, t1, value): one GPU-metrics sample of a link counter
-- covering (t0, t1] (t0 = the previous sample of the same counter); gpu_calls(pid, device, api,
-- op, bytes, gpu_start, gpu_end): the report's calls that ran on a GPU.
-- A sample counts for a call in proportion to the time they share, so a call shorter than the
-- sampling period still gets the value of the sample that covers it.
WITH shared AS (
    SELECT c.pid, c.device, c.api, c.op, c.bytes, c.gpu_start, s.metric, s.value,
           least(s.t1, c.gpu_end) - greatest(s.t0, c.gpu_start) AS ns
    FROM gpu_calls c
    JOIN link_samples s
      ON s.device = c.device AND s.t0 < c.gpu_end AND s.t1 > c.gpu_start
)
SELECT pid, device, api, op, bytes, metric,
       count(DISTINCT gpu_start)  AS calls,
       sum(ns)                    AS covered_ns,
       sum(value * ns)            AS weighted,      -- value x ns: the time-weighted sum
       max(value)                 AS max_value
FROM shared
WHERE ns > 0
GROUP BY ALL
