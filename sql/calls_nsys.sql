-- One row per collective call per process of one nsys report (ranks are assigned later,
-- across all reports of the job, in sql/collectives.sql), for the calls of one part of the
-- report: the ranges numbered $rid_lo..$rid_hi and the kernels numbered $kid_lo..$kid_hi that no
-- range owns. nsyscomm/ingest/nsys/calls.py runs it part after part: every join below is keyed
-- by a range, a kernel, a call or a process, so the parts' rows are the whole report's, and
-- DuckDB's working memory is one part's, not the report's.
-- Inputs: nccl_kernels (sql/nccl_kernels.sql), nccl_kernel_names, src_ranges (relevant NVTX
-- ranges; parsed, msg_*: the fields of the wrapper messages the C scan split), ranges (rid: the
-- src_ranges rid, start, end, globalTid, kind, name: those of src_ranges that can own kernels, the
-- nsyscomm wrapper's and PyTorch's nccl:/gloo: record_function ranges, the name only for
-- PyTorch's; made by nsyscomm/ingest/nsys/extract.py), and the lookups made once per report by
-- sql/call_lookups_nsys.sql (call_*, and kernel_owners: each kernel's owning range).
-- Metadata priority per row: wrapper range > PyTorch range > kernel name alone.
-- exec_start/exec_end: the execution span where this source knows it beyond the call's own range
-- and kernels (an asynchronous call's completion, docs/architecture.md "Timing model"), else NULL.
-- step: the wrapper's label, p_step: the ProfilerStep#N range's step; sql/call_steps_nsys.sql
-- chooses between them once every part is made (the choice depends on all calls of a process).
WITH owned AS (
    -- the part's NCCL kernels that its ranges own (kernel_owners); wrapper: whether the owner is
    -- the wrapper's range, so that each kind of range looks up only its own kernels (a join with
    -- nothing to look up costs nothing)
    SELECT * FROM kernel_owners WHERE rid BETWEEN $rid_lo AND $rid_hi
),
unowned AS (
    -- the part's NCCL kernels that no range owns (kernel_owners)
    SELECT k.*
    FROM kernel_owners o JOIN nccl_kernels k ON k.kid = o.kid
    WHERE o.rid IS NULL AND o.kid BETWEEN $kid_lo AND $kid_hi
),
by_range AS (
    -- name_id: the first kernel's name, which tells op, algorithm, protocol and dtype
    -- (nccl_kernel_names, joined to the calls: the names' strings are not carried through the
    -- joins by range)
    SELECT rid, wrapper,
           min(kstart)                 AS gpu_start,
           max(kend)                   AS gpu_end,
           count(*)                    AS kernels,
           sum(kend - kstart)::BIGINT  AS kernel_ns,  -- BIGINT, not HUGEINT: Arrow int64, not decimal
           arg_min(name_id, kstart)    AS name_id,
           arg_min(stream, kstart)     AS stream,
           arg_min(device, kstart)     AS device
    FROM owned GROUP BY rid, wrapper
),
wrapper AS (
    -- a message the C scan split comes with its fields (parsed; nsyscomm.ingest.nsys.scan_arrow.MESSAGE_FIELDS);
    -- the others are split here: at '|' when their fields are in the order the wrapper writes
    -- them (fast path), else field by field. Empty values are NULL.
    SELECT r.*,
           CASE WHEN r.parsed THEN r.msg_op ELSE nullif(CASE WHEN r.fast THEN substr(r.f[1], 10)
                ELSE regexp_extract(r.head, '^nsyscomm:([^|]*)', 1) END, '') END                      AS w_op,
           CASE WHEN r.parsed THEN r.msg_api ELSE nullif(CASE WHEN r.fast THEN substr(r.f[2], 5)
                ELSE regexp_extract(r.head, '\|api=([^|]*)', 1) END, '') END                         AS w_api,
           CASE WHEN r.parsed THEN r.msg_bytes ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[3], 7)
                ELSE regexp_extract(r.head, '\|bytes=([^|]*)', 1) END, '') AS BIGINT) END            AS w_bytes,
           CASE WHEN r.parsed THEN r.msg_dtype ELSE nullif(CASE WHEN r.fast THEN substr(r.f[4], 7)
                ELSE regexp_extract(r.head, '\|dtype=([^|]*)', 1) END, '') END                       AS w_dtype,
           CASE WHEN r.parsed THEN r.msg_numel ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[5], 7)
                ELSE regexp_extract(r.head, '\|numel=([^|]*)', 1) END, '') AS BIGINT) END            AS w_numel,
           CASE WHEN r.parsed THEN r.msg_pg ELSE nullif(CASE WHEN r.fast THEN substr(r.f[6], 4)
                ELSE regexp_extract(r.head, '\|pg=([^|]*)', 1) END, '') END                          AS w_pg,
           CASE WHEN r.parsed THEN r.msg_gsize::INTEGER ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[7], 7)
                ELSE regexp_extract(r.head, '\|gsize=([^|]*)', 1) END, '') AS INTEGER) END           AS w_gsize,
           CASE WHEN r.parsed THEN r.msg_granks ELSE nullif(CASE WHEN r.fast THEN substr(r.f[8], 8)
                ELSE regexp_extract(r.head, '\|granks=([^|]*)', 1) END, '') END                      AS w_granks,
           CASE WHEN r.parsed THEN r.msg_seq ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[9], 5)
                ELSE regexp_extract(r.head, '\|seq=([^|]*)', 1) END, '') AS BIGINT) END              AS w_seq,
           CASE WHEN r.parsed THEN r.msg_step ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[11], 6)
                ELSE regexp_extract(r.head, '\|step=([^|]*)', 1) END, '') AS BIGINT) END             AS w_step,
           CASE WHEN r.parsed THEN r.msg_peer::INTEGER ELSE TRY_CAST(nullif(CASE WHEN r.fast THEN substr(r.f[12], 6)
                ELSE regexp_extract(r.head, '\|peer=([^|]*)', 1) END, '') AS INTEGER) END            AS w_peer,
           -- the caller is last and read to the end: it may hold '|', '=' or newlines
           CASE WHEN r.parsed THEN r.msg_caller
                WHEN strpos(r.name, '|caller=') > 0 THEN nullif(substr(r.name, strpos(r.name, '|caller=') + 8), '') END
                                                                                                      AS w_caller
    FROM (
        SELECT *,
               -- 10 or 11 '|', each matched by one '|key=' of the pattern in turn: field i holds key i
               CASE len(f)
                   WHEN 11 THEN head LIKE 'nsyscomm:%|api=%|bytes=%|dtype=%|numel=%|pg=%|gsize=%|granks=%|seq=%|async=%|step=%'
                   WHEN 12 THEN head LIKE 'nsyscomm:%|api=%|bytes=%|dtype=%|numel=%|pg=%|gsize=%|granks=%|seq=%|async=%|step=%|peer=%'
                   ELSE false END AS fast
        FROM (SELECT *, string_split(head, '|') AS f
              FROM (SELECT *, CASE WHEN NOT parsed THEN split_part(name, '|caller=', 1) END AS head
                    -- joined before the message is split: a hash join carrying every call's
                    -- list of strings cost more
                    FROM (SELECT r.rid, r.globalTid, r.start, r."end", r.name, r.parsed, COLUMNS('^msg_'),
                                 b.* EXCLUDE (rid, wrapper, name_id),
                                 n.name AS kernel, n.op AS kop, n.algo, n.proto, n.dtype AS kdtype
                          FROM src_ranges r LEFT JOIN by_range b ON b.rid = r.rid AND b.wrapper
                          LEFT JOIN nccl_kernel_names n ON n.id = b.name_id
                          WHERE (r.parsed OR r.name LIKE 'nsyscomm:%') AND r.rid BETWEEN $rid_lo AND $rid_hi)))
    ) r
),
calls AS (
    SELECT
        globalTid                                           AS gtid,
        ((globalTid >> 24) & 16777215)                      AS pid,
        (globalTid & 16777215)                              AS tid,
        w_op AS op, w_api AS api, w_bytes AS bytes, coalesce(w_dtype, kdtype) AS dtype, w_numel AS numel,
        w_pg AS "group", w_gsize AS group_size, w_granks AS group_ranks, w_seq AS seq, w_caller AS caller,
        w_step AS step,
        start AS cpu_start, "end" AS cpu_end, gpu_start, gpu_end, stream, device,
        'wrapper' AS source, kernel, algo, proto,
        coalesce(kernels, 0) AS kernels, coalesce(kernel_ns, 0) AS kernel_ns,
        w_peer AS peer,
        -- the execution span of an asynchronous call without kernels (gloo, MPI): from its enqueue
        -- to its completion on the backend's thread, or to the end of the caller's wait for it
        -- when that came first (the mark waits for the GIL; a wait returns only once the work is
        -- done), never before the enqueue. The kernels stay the truth where there are any.
        CASE WHEN gpu_start IS NULL AND least(x.done, x.wait_end) IS NOT NULL THEN start END AS exec_start,
        CASE WHEN gpu_start IS NULL AND least(x.done, x.wait_end) IS NOT NULL
             THEN greatest(start, least(x.done, x.wait_end)) END AS exec_end,
        x.wait_start, x.wait_end,
        -- the call's own key in this query: its range's number, or its kernel's (below zero)
        rid AS call_key
    FROM wrapper
    LEFT JOIN call_completions x
      ON x.x_pid = ((wrapper.globalTid >> 24) & 16777215) AND x.x_op = wrapper.w_op AND x.x_pg = wrapper.w_pg
         AND x.x_seq = wrapper.w_seq AND x.x_peer IS NOT DISTINCT FROM wrapper.w_peer
    UNION ALL
    -- PyTorch ranges that own kernels (a range without a kernel is CPU bookkeeping, not a call)
    SELECT
        r.globalTid, ((r.globalTid >> 24) & 16777215), (r.globalTid & 16777215),
        NULL, regexp_replace(r.name, ',\s*op_id\s*=.*$', ''), NULL, b.kdtype, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        r.start, r."end", b.gpu_start, b.gpu_end, b.stream, b.device,
        'torch_range', b.kernel, b.algo, b.proto, b.kernels, b.kernel_ns, NULL, NULL, NULL, NULL, NULL, r.rid
    FROM ranges r JOIN (SELECT b.*, n.name AS kernel, n.op AS kop, n.algo, n.proto, n.dtype AS kdtype
                        FROM by_range b JOIN nccl_kernel_names n ON n.id = b.name_id
                        WHERE NOT b.wrapper) b ON b.rid = r.rid
    WHERE r.kind = 'torch_range'
    UNION ALL
    -- kernels no range owns, including kernels whose launch row is outside the capture window
    SELECT
        launch_tid, ((coalesce(launch_tid, global_pid) >> 24) & 16777215),
        CASE WHEN launch_tid IS NULL THEN NULL ELSE (launch_tid & 16777215) END,
        kop, kernel, NULL, kdtype, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        launch_start, launch_end, kstart, kend, stream, device,
        'kernel_name', kernel, algo, proto, 1, kend - kstart, NULL, NULL, NULL, NULL, NULL, -1 - kid
    FROM (SELECT o.*, n.name AS kernel, n.op AS kop, n.algo, n.proto, n.dtype AS kdtype
          FROM unowned o JOIN nccl_kernel_names n ON n.id = o.name_id)
),
-- The calls outside their process's capture window dropped; a process has one window at most
kept AS (
    SELECT c.* FROM calls c LEFT JOIN call_windows w ON w.pid = c.pid
    WHERE c.cpu_start IS NULL OR w.pid IS NULL OR c.cpu_start BETWEEN w.w_start AND w.w_end
),
-- The per-call lookups below are joined by call_key on narrow rows, never as subqueries that
-- refer to the call or as a window over it, nor on the calls themselves: DuckDB would hold every
-- call's columns meanwhile (a CTE read more than once is materialized).
-- call_keys: each call's key, thread, process and start, read again from the part's ranges and
-- kernels (those of ranges that are no call, or of calls outside the window, go unused)
call_keys AS NOT MATERIALIZED (
    SELECT rid AS call_key, globalTid AS gtid, ((globalTid >> 24) & 16777215) AS pid, start AS cpu_start
    FROM ranges WHERE rid BETWEEN $rid_lo AND $rid_hi
    UNION ALL
    SELECT -1 - kid, launch_tid, ((coalesce(launch_tid, global_pid) >> 24) & 16777215), launch_start
    FROM unowned
),
-- Each call's ProfilerStep#N range's step
call_steps AS (
    SELECT c.call_key, max(s.step) AS p_step
    FROM call_keys c JOIN call_profiler_steps s ON s.globalTid = c.gtid AND c.cpu_start BETWEEN s.start AND s."end"
    GROUP BY c.call_key
),
-- the step at which the call's rank joined, for a call it made after (a shadow)
call_joins AS (
    SELECT c.call_key, max(j.step) AS joined
    FROM call_keys c JOIN call_join_ranges j ON j.pid = c.pid AND c.cpu_start BETWEEN j.start AND j."end"
    GROUP BY c.call_key
)
SELECT c.* EXCLUDE (gtid, step, call_key), c.step, p.p_step, j.joined
FROM kept c
LEFT JOIN call_steps p ON p.call_key = c.call_key
LEFT JOIN call_joins j ON j.call_key = c.call_key
