-- The lookups of sql/calls_nsys.sql, made once per report before its calls are made a part at a
-- time (nsyscomm/ingest/nsys/calls.py), and dropped after: temp tables, each small (a row per
-- process, per step or per asynchronous call) but kernel_owners (a narrow row per NCCL kernel).
-- Inputs: src_ranges, nccl_kernels (sql/calls_nsys.sql says what they hold), and innermost
-- (kid, kind, rid: per NCCL kernel and kind of range, the innermost range, latest start,
-- containing the kernel's launch call on the same thread; made by
-- nsyscomm/ingest/nsys/extract.py: _LAUNCH_OWNERS, an ASOF join, and _LAUNCH_HOLDERS, a range join
-- for the launches it leaves, in statements of their own: in DuckDB 1.5 any materialized CTE in a
-- query turns IEJoins into quadratic piecewise merge joins).

-- torch.profiler's ProfilerStep#N ranges: the step of the calls they hold where the wrapper saw
-- no step boundary (call_step_marks), and of those the wrapper did not label
CREATE OR REPLACE TEMP TABLE call_profiler_steps AS
SELECT globalTid, start, "end", TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)', 1) AS BIGINT) AS step
FROM src_ranges WHERE name LIKE 'ProfilerStep#%';

-- the processes with the wrapper's step markers (an optimizer step, a pipeline schedule's step,
-- nsyscomm.step(i)): there the wrapper's label is a step, not "no step seen yet"
CREATE OR REPLACE TEMP TABLE call_step_marks AS
SELECT DISTINCT ((globalTid >> 24) & 16777215) AS pid FROM src_ranges WHERE name LIKE 'nsyscomm.step|%';

-- the wrapper's capture range of each process under `nsyscomm run --steps A:B` (pushed when its
-- step A begins, popped when its step B begins). nsys collects from the first process's push to
-- the last one's pop, so a rank that left its window early goes on being recorded: its calls
-- outside its own range are outside the window. A range without an end (src_ranges ends it
-- where it starts) was still open when the capture stopped: open to the capture's end.
-- pid, w_start, w_end: the process and its window
CREATE OR REPLACE TEMP TABLE call_windows AS
SELECT ((globalTid >> 24) & 16777215) AS pid, min(start) AS w_start,
       CASE WHEN max("end") > min(start) THEN max("end") ELSE 9223372036854775807 END AS w_end
FROM src_ranges WHERE name = 'nsyscomm.capture' GROUP BY pid;

-- a rank that joined early under torch.distributed.algorithms.Join: the wrapper's range over its
-- Join.__exit__, where it issues shadow collectives to match the ranks still training
-- (nsyscomm/capture/join_ranks.py); step: its step when it joined
CREATE OR REPLACE TEMP TABLE call_join_ranges AS
SELECT ((globalTid >> 24) & 16777215) AS pid, start, "end",
       TRY_CAST(regexp_extract(name, '\|step=([0-9]+)', 1) AS BIGINT) AS step
FROM src_ranges WHERE name LIKE 'nsyscomm.joined|%';

-- an asynchronous call's completion mark (emitted on the backend's thread when its work is done)
-- and the caller's waits for it (nsyscomm/nvtx_format.py), by the call they name in their
-- process: (op, group, seq, peer); done, wait_start, wait_end: the mark's time, the waits' span
CREATE OR REPLACE TEMP TABLE call_completions AS
SELECT ((globalTid >> 24) & 16777215)                                         AS x_pid,
       regexp_extract(name, '\|op=([^|]*)', 1)                                AS x_op,
       regexp_extract(name, '\|pg=([^|]*)', 1)                                AS x_pg,
       TRY_CAST(regexp_extract(name, '\|seq=([0-9]+)', 1) AS BIGINT)          AS x_seq,
       TRY_CAST(nullif(regexp_extract(name, '\|peer=(-?[0-9]+)', 1), '') AS INTEGER) AS x_peer,
       min(start) FILTER (WHERE name LIKE 'nsyscomm.done|%')                  AS done,
       min(start) FILTER (WHERE name LIKE 'nsyscomm.wait|%')                  AS wait_start,
       max("end") FILTER (WHERE name LIKE 'nsyscomm.wait|%')                  AS wait_end
FROM src_ranges
WHERE name LIKE 'nsyscomm.done|%' OR name LIKE 'nsyscomm.wait|%'
GROUP BY ALL;

-- each NCCL kernel's owner (a range owns a kernel when it contains the kernel's launch call on
-- the same thread; grouped calls launch at ncclGroupEnd, which the outer PyTorch/wrapper range
-- still contains): its innermost wrapper range, else its innermost PyTorch range, else none.
-- kid: the kernel (nccl_kernels); rid: the range (src_ranges), NULL for a kernel no range owns;
-- wrapper: whether that range is the wrapper's (else PyTorch's); kstart, kend, name_id, stream,
-- device: the kernel's, those its range's call reads (sql/calls_nsys.sql reads them here, not
-- through a join per part)
CREATE OR REPLACE TEMP TABLE kernel_owners AS
SELECT k.kid, coalesce(w.rid, t.rid) AS rid,
       w.rid IS NOT NULL AS wrapper,
       k.kstart, k.kend, k.name_id, k.stream, k.device
FROM nccl_kernels k
LEFT JOIN innermost w ON w.kid = k.kid AND w.kind = 'wrapper'
LEFT JOIN innermost t ON t.kid = k.kid AND t.kind = 'torch_range';
