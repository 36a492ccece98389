-- NCCL kernels of one nsys report, each with its launch call.
-- Inputs (tables read by nsyscomm/ingest/nsys/reader.py): src_kernels, src_runtime; nccl_kernel_names.
-- Narrow on purpose: the name's strings are joined once per call in sql/calls_nsys.sql.
-- The launch join is process-aware: correlation ids restart in every process, so
-- correlationId alone would pair a kernel with launches of other ranks.
-- kid: a key of the kernel for sql/calls_nsys.sql: its row's id, unique and free (numbering the
-- kernels in time order cost a sort; even row_number() OVER () ran the join on one core).
SELECT
    k.rowid            AS kid,
    k.start            AS kstart,
    k."end"            AS kend,
    k.deviceId         AS device,
    k.streamId         AS stream,
    k.globalPid        AS global_pid,
    k.shortName        AS name_id,      -- its name and what it tells: nccl_kernel_names
    l.start            AS launch_start,
    l."end"            AS launch_end,
    l.globalTid        AS launch_tid
FROM src_kernels k
JOIN nccl_kernel_names n ON n.id = k.shortName
LEFT JOIN src_runtime l
       ON l.correlationId = k.correlationId
      AND (l.globalTid >> 24) = (k.globalPid >> 24)
