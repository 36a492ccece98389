-- Compute (non-NCCL) kernels of one report: what can hide communication (nsyscomm/ingest/busy.py),
-- sorted as busy.py walks them. Inputs: src_kernels, nccl_kernel_names.
SELECT (globalPid >> 24) & 16777215 AS pid, coalesce(deviceId, -1) AS device, start, "end"
FROM src_kernels
WHERE shortName NOT IN (SELECT id FROM nccl_kernel_names) AND start IS NOT NULL AND "end" IS NOT NULL
ORDER BY pid, device, start
