-- Busy periods of compute (non-NCCL) kernels per process and device: the union of their
-- intervals, as disjoint islands (gaps-and-islands over the running maximum end).
-- Inputs: src_kernels, nccl_kernel_names. Exposed communication is NCCL time outside these.
WITH k AS (
    SELECT (globalPid >> 24) & 16777215 AS pid, deviceId AS device, start, "end"
    FROM src_kernels
    WHERE shortName NOT IN (SELECT id FROM nccl_kernel_names)
),
m AS (
    SELECT *, max("end") OVER (PARTITION BY pid, device ORDER BY start, "end"
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM k
),
g AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY pid, device ORDER BY start, "end" ROWS UNBOUNDED PRECEDING) AS island
    FROM m
)
SELECT pid, device, min(start) AS start, max("end") AS "end"
FROM g GROUP BY pid, device, island
