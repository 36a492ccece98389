-- One row per collective call per process of one nsys report (ranks are assigned later,
-- across all reports of the job, in sql/collectives.sql).
-- Inputs: nccl_kernels (sql/nccl_kernels.sql), src_ranges (relevant NVTX ranges: the
-- nsyscomm wrapper's and PyTorch's nccl:/gloo: record_function ranges).
-- Metadata priority per row: wrapper range > PyTorch range > kernel name alone.
WITH profiler_steps AS (
    -- torch.profiler's ProfilerStep#N ranges give the step to calls the wrapper did not label
    SELECT globalTid, start, "end", TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)', 1) AS BIGINT) AS step
    FROM src_ranges WHERE name LIKE 'ProfilerStep#%'
),
ranges AS (
    SELECT row_number() OVER (ORDER BY start, globalTid, name, "end") AS rid, start, "end", globalTid, name,
           CASE WHEN name LIKE 'nsyscomm:%' THEN 'wrapper' ELSE 'torch_range' END AS kind
    FROM src_ranges
    WHERE name LIKE 'nsyscomm:%' OR name LIKE 'nccl:%' OR name LIKE 'gloo:%'
),
kernels AS (
    SELECT * FROM nccl_kernels   -- kid: sql/nccl_kernels.sql
),
-- a range owns a kernel when it contains the kernel's launch call on the same thread;
-- grouped calls launch at ncclGroupEnd, which the outer PyTorch/wrapper range still contains
-- innermost (kid, kind, rid): per NCCL kernel and kind of range, the innermost range (latest
-- start) containing the kernel's launch call on the same thread. It is made by nsys_sqlite.py
-- (_LAUNCH_OWNERS) as a range join (IEJoin) in a statement of its own: in DuckDB 1.5 any
-- materialized CTE in a query turns IEJoins into quadratic piecewise merge joins. Its rid is
-- this `ranges` rid (same filter and order; ties are identical rows).
owned AS (
    SELECT k.*,
           coalesce(w.rid, t.rid) AS rid
    FROM kernels k
    LEFT JOIN innermost w ON w.kid = k.kid AND w.kind = 'wrapper'
    LEFT JOIN innermost t ON t.kid = k.kid AND t.kind = 'torch_range'
),
by_range AS (
    SELECT rid,
           min(kstart)                 AS gpu_start,
           max(kend)                   AS gpu_end,
           count(*)                    AS kernels,
           sum(kend - kstart)          AS kernel_ns,
           arg_min(kernel, kstart)     AS kernel,
           arg_min(kop, kstart)        AS kop,
           arg_min(algo, kstart)       AS algo,
           arg_min(proto, kstart)      AS proto,
           arg_min(kdtype, kstart)     AS kdtype,
           arg_min(stream, kstart)     AS stream,
           arg_min(device, kstart)     AS device
    FROM owned WHERE rid IS NOT NULL GROUP BY rid
),
wrapper AS (
    -- one regular expression over the fields in the order the wrapper writes them (fast path);
    -- a message with its fields in another order is read field by field
    SELECT r.*, b.* EXCLUDE (rid),
           CASE WHEN f.op <> '' THEN f.op     ELSE regexp_extract(r.head, '^nsyscomm:([^|]*)', 1) END AS w_op,
           CASE WHEN f.op <> '' THEN f.api    ELSE regexp_extract(r.head, '\|api=([^|]*)', 1) END     AS w_api,
           CASE WHEN f.op <> '' THEN f.bytes  ELSE regexp_extract(r.head, '\|bytes=([^|]*)', 1) END   AS w_bytes,
           CASE WHEN f.op <> '' THEN f.dtype  ELSE regexp_extract(r.head, '\|dtype=([^|]*)', 1) END   AS w_dtype,
           CASE WHEN f.op <> '' THEN f.numel  ELSE regexp_extract(r.head, '\|numel=([^|]*)', 1) END   AS w_numel,
           CASE WHEN f.op <> '' THEN f.pg     ELSE regexp_extract(r.head, '\|pg=([^|]*)', 1) END      AS w_pg,
           CASE WHEN f.op <> '' THEN f.gsize  ELSE regexp_extract(r.head, '\|gsize=([^|]*)', 1) END   AS w_gsize,
           CASE WHEN f.op <> '' THEN f.granks ELSE regexp_extract(r.head, '\|granks=([^|]*)', 1) END  AS w_granks,
           CASE WHEN f.op <> '' THEN f.seq    ELSE regexp_extract(r.head, '\|seq=([^|]*)', 1) END     AS w_seq,
           CASE WHEN f.op <> '' THEN f.step   ELSE regexp_extract(r.head, '\|step=([^|]*)', 1) END    AS w_step,
           CASE WHEN f.op <> '' THEN f.peer   ELSE regexp_extract(r.head, '\|peer=([^|]*)', 1) END    AS w_peer,
           -- the caller is last and read to the end: it may hold '|', '=' or newlines
           CASE WHEN strpos(r.name, '|caller=') > 0 THEN substr(r.name, strpos(r.name, '|caller=') + 8) END AS w_caller
    FROM (
        SELECT *, regexp_extract(head,
                  '^nsyscomm:([^|]*)\|api=([^|]*)\|bytes=([^|]*)\|dtype=([^|]*)\|numel=([^|]*)\|pg=([^|]*)\|gsize=([^|]*)\|granks=([^|]*)\|seq=([^|]*)\|async=([^|]*)\|step=([^|]*)(?:\|peer=([^|]*))?$',
                  ['op', 'api', 'bytes', 'dtype', 'numel', 'pg', 'gsize', 'granks', 'seq', 'async', 'step', 'peer']) AS f
        FROM (SELECT *, split_part(name, '|caller=', 1) AS head FROM ranges WHERE kind = 'wrapper')
    ) r
    LEFT JOIN by_range b ON b.rid = r.rid
),
calls AS (
    SELECT
        globalTid                                           AS gtid,
        ((globalTid >> 24) & 16777215)                      AS pid,
        (globalTid & 16777215)                              AS tid,
        nullif(w_op, '')                                    AS op,
        nullif(w_api, '')                                   AS api,
        TRY_CAST(nullif(w_bytes, '') AS BIGINT)             AS bytes,
        coalesce(nullif(w_dtype, ''), kdtype)               AS dtype,
        TRY_CAST(nullif(w_numel, '') AS BIGINT)             AS numel,
        nullif(w_pg, '')                                    AS "group",
        TRY_CAST(nullif(w_gsize, '') AS INTEGER)            AS group_size,
        nullif(w_granks, '')                                AS group_ranks,
        TRY_CAST(nullif(w_seq, '') AS BIGINT)               AS seq,
        nullif(w_caller, '')                                AS caller,
        TRY_CAST(nullif(w_step, '') AS BIGINT)              AS step,
        start AS cpu_start, "end" AS cpu_end, gpu_start, gpu_end, stream, device,
        'wrapper' AS source, kernel, algo, proto,
        coalesce(kernels, 0) AS kernels, coalesce(kernel_ns, 0) AS kernel_ns,
        TRY_CAST(nullif(w_peer, '') AS INTEGER)             AS peer
    FROM wrapper
    UNION ALL
    -- PyTorch ranges that own kernels (a range without a kernel is CPU bookkeeping, not a call)
    SELECT
        r.globalTid, ((r.globalTid >> 24) & 16777215), (r.globalTid & 16777215),
        NULL, regexp_replace(r.name, ',\s*op_id\s*=.*$', ''), NULL, b.kdtype, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        r.start, r."end", b.gpu_start, b.gpu_end, b.stream, b.device,
        'torch_range', b.kernel, b.algo, b.proto, b.kernels, b.kernel_ns, NULL
    FROM ranges r JOIN by_range b ON b.rid = r.rid
    WHERE r.kind = 'torch_range'
    UNION ALL
    -- kernels no range owns, including kernels whose launch row is outside the capture window
    SELECT
        launch_tid, ((coalesce(launch_tid, global_pid) >> 24) & 16777215),
        CASE WHEN launch_tid IS NULL THEN NULL ELSE (launch_tid & 16777215) END,
        kop, kernel, NULL, kdtype, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        launch_start, launch_end, kstart, kend, stream, device,
        'kernel_name', kernel, algo, proto, 1, kend - kstart, NULL
    FROM owned WHERE rid IS NULL
)
SELECT c.* EXCLUDE (gtid, step),
       coalesce(c.step, (SELECT max(s.step) FROM profiler_steps s
                         WHERE s.globalTid = c.gtid AND c.cpu_start BETWEEN s.start AND s."end")) AS step
FROM calls c
