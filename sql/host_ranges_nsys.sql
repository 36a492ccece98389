-- The profiled program's own NVTX ranges (push/pop and start/end: data loading, checkpointing,
-- torch.cuda.nvtx.range, record_function under emit_nvtx) long enough to explain a late arrival,
-- per process and thread, for the late-arrival diagnosis (nsyscomm.analyses.late). nsyscomm's,
-- NCCL's, gloo's and the profiler's step ranges are left out: they are the calls themselves or
-- enclose them. Names are cut to the name bound (nsyscomm/ingest/limits.py, 4096 characters).
-- Inputs: r.NVTX_EVENTS, r.StringIds of the attached report (eventType 59: push/pop, 60: start/end).
WITH ranges AS (
    SELECT e.globalTid, e.start, e."end", coalesce(e.text, s.value) AS name
    FROM r.NVTX_EVENTS e
    LEFT JOIN r.StringIds s ON s.id = e.textId
    WHERE e.eventType IN (59, 60) AND e."end" - e.start >= $min_ns AND e.globalTid IS NOT NULL
)
SELECT ((globalTid >> 24) & 16777215)::BIGINT AS pid,
       (globalTid & 16777215)::BIGINT         AS tid,
       start::BIGINT                          AS start,
       "end"::BIGINT                          AS "end",
       CASE WHEN length(name) > 4096 THEN substr(name, 1, 4096) || '…[cut]' ELSE name END AS name
FROM ranges
WHERE name IS NOT NULL
  AND NOT (name LIKE 'nsyscomm%' OR name LIKE 'nccl%' OR name LIKE 'NCCL%' OR name LIKE 'gloo:%'
           OR name LIKE 'c10d::%' OR name LIKE 'record_param_comms%' OR name LIKE 'ProfilerStep#%')
