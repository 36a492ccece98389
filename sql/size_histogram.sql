-- mpitrace's message-size distribution: per op, power-of-two bins of the message size.
-- Input: collectives. Bin [lo, 2*lo); size 0 (barrier) has its own bin; unknown sizes and calls
-- that set up their communicator or never completed are left out.
SELECT op,
       CASE WHEN bytes = 0 THEN 0 ELSE (2::HUGEINT ** floor(log2(bytes)))::BIGINT END AS bin_lo,
       CASE WHEN bytes = 0 THEN 0 ELSE (2::HUGEINT ** (floor(log2(bytes)) + 1))::BIGINT END AS bin_hi,
       count(*)                         AS calls,
       avg(bytes)                       AS avg_bytes,
       sum(duration_ns) / 1e6           AS total_ms
FROM collectives
WHERE bytes IS NOT NULL AND NOT setup AND completed
GROUP BY ALL
ORDER BY op, bin_lo
