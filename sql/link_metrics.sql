-- NVLink / PCIe / C2C throughput during collectives, per op and message size and nsys metric:
-- the time-weighted mean of the metric's samples over the calls' GPU time, and its peak sample.
-- Input: link_usage (the per-report sums of sql/link_usage.sql, op canonical). The metric keeps
-- nsys's own name, unit included ("NVLink RX Responses User Data [Throughput %]").
SELECT op, bytes, metric,
       sum(calls)                              AS calls,
       count(DISTINCT concat(report, ':', device)) AS devices,
       sum(covered_ns) / 1e6                   AS covered_ms,
       sum(weighted) / nullif(sum(covered_ns), 0) AS avg_value,
       max(max_value)                          AS max_value
FROM link_usage
WHERE op IS NOT NULL
GROUP BY ALL
ORDER BY op, bytes, metric
