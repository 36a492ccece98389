-- NCCL kernels of one nsys report, each with its launch call.
-- Inputs (views made by nsyscomm/ingest/nsys_sqlite.py): src_kernels, src_runtime, nccl_kernel_names.
-- The launch join is process-aware: correlation ids restart in every process, so
-- correlationId alone would pair a kernel with launches of other ranks.
-- kid numbers the kernels (in time order) for sql/calls_nsys.sql.
SELECT
    row_number() OVER (ORDER BY k.start, k.globalPid, k.streamId, k."end", k.correlationId) AS kid,
    k.start            AS kstart,
    k."end"            AS kend,
    k.deviceId         AS device,
    k.streamId         AS stream,
    k.globalPid        AS global_pid,
    n.name             AS kernel,
    n.op               AS kop,
    n.algo,
    n.proto,
    n.dtype            AS kdtype,
    l.start            AS launch_start,
    l."end"            AS launch_end,
    l.globalTid        AS launch_tid
FROM src_kernels k
JOIN nccl_kernel_names n ON n.id = k.shortName
LEFT JOIN src_runtime l
       ON l.correlationId = k.correlationId
      AND (l.globalTid >> 24) = (k.globalPid >> 24)
