-- Compute (non-NCCL) kernels of one report: what can hide communication (nsyscomm/ingest/busy.py),
-- and what was queued ahead of each call (name: the StringIds id; nsyscomm/ingest/nsys/gap_kernels.py).
-- Inputs: src_kernels, nccl_kernel_names. Unsorted: busy.py sorts them in numpy, which makes the
-- whole of the islands on one core faster than DuckDB's ORDER BY pid, device, start alone on both.
SELECT (globalPid >> 24) & 16777215 AS pid, coalesce(deviceId, -1) AS device, start, "end",
       coalesce(shortName, -1) AS name
FROM src_kernels
WHERE shortName NOT IN (SELECT id FROM nccl_kernel_names) AND start IS NOT NULL AND "end" IS NOT NULL
