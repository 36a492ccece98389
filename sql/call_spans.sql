-- Each call's number and execution span in the job, on narrow rows (the table call_spans, which
-- sql/collectives.sql joins back to the wide rows by call_id, each call's number in the job:
-- combine/calls.py). A query of its own, so that the working memory of its window functions is
-- free again before that join runs.
-- Calls without the wrapper's (group, seq) get seq = their order among the rank's calls
-- of the same op, and a group size inferred from how many ranks share that seq.
-- A point-to-point message is its send and its receive: the n-th send from one rank to another in
-- a communicator pairs with the n-th receive there from that rank (messages between two ranks
-- arrive in the order sent), whatever each side's seq, which counts both directions of a pair.
-- The window functions below sort every column they carry, and DuckDB stores whole a CTE that is
-- read twice: so each window sorts only the calls it numbers, with the columns its partitions,
-- orders and result need, and gives narrow rows (call_id and what it computed), which the calls,
-- read again, join back by call_id. `timing`, `numbered` and `own` are NOT MATERIALIZED: each
-- reader recomputes them from the calls, where a stored copy of every call's row would be held
-- through the query.
-- $unnumbered, $messages, $stream_queues, $group_queues: whether any call may lack a seq, be a
-- point-to-point call, or wait in a CUDA stream's or a gloo group's queue (combine/calls.py's
-- Needs, counted as the calls are first read); where none can, that part reads no call (each
-- would otherwise scan every call to keep none). True for all four gives the same rows.
-- A process is a rank (proc_ranks gives each process of the job its own), so the windows of a
-- process's calls partition by it, a number, not by the report's name, a string that each sort
-- compared row by row; a call without a rank (no process known) keeps its report and pid.
WITH timing AS NOT MATERIALIZED (
    SELECT call_id, report, pid, tid, rank, op, api, "group", group_size, seq, peer, pair, source,
           cpu_start, cpu_end, gpu_start, gpu_end, stream, device, exec_start, exec_end, init_ns
    FROM calls_ranked
),
-- the calls without a seq numbered by order (none when the wrapper was on): call_id, seq, group_size
-- (calls that tie on time, on two streams or threads, numbered in one order every run). Stored,
-- narrow: each reading of `numbered` reads it, where its windows would run again.
by_order AS MATERIALIZED (
    SELECT call_id, seq, coalesce(group_size, count(*) OVER (PARTITION BY "group", op, seq)) AS group_size
    FROM (SELECT call_id, "group", op, group_size,
                 row_number() OVER (PARTITION BY rank, op
                                    ORDER BY coalesce(exec_start, gpu_start, cpu_start), cpu_start, pid, tid, stream,
                                             coalesce(exec_end, gpu_end, cpu_end)) - 1 AS seq
          FROM timing WHERE $unnumbered AND seq IS NULL)
),
-- every call with its seq and group size: its own seq, or else by_order's
numbered AS NOT MATERIALIZED (
    SELECT t.* REPLACE (coalesce(t.seq, o.seq) AS seq, coalesce(o.group_size, t.group_size) AS group_size)
    FROM timing t
    LEFT JOIN by_order o USING (call_id)
),
-- each message's place among the messages from its sender to its receiver
messages AS (
    SELECT call_id, op, api, "group", sender, receiver, exec_end, gpu_end, cpu_end,
           row_number() OVER (PARTITION BY "group", sender, receiver, op ORDER BY seq, exec_start, cpu_start) - 1 AS msg
    FROM (SELECT *, CASE WHEN op = 'send' THEN rank ELSE peer END AS sender,
                    CASE WHEN op = 'send' THEN peer ELSE rank END AS receiver
          FROM numbered WHERE $messages AND pair IS NOT NULL)
),
-- a send's work is done once its receive has the data: its execution ends no later than its
-- receive's, where the receive's end is a completion (its kernels', its completion mark or the
-- end of its caller's wait -- the source's exec_end --, or a synchronous receive's return). An
-- asynchronous receive with neither (irecv, batch_isend_irecv) ends at its enqueue: no bound.
-- (the point-to-point calls only: call_id, sender, receiver, msg, recv_done; stored, narrow: each
-- reading of `own` reads it)
p2p AS MATERIALIZED (
    SELECT call_id, sender, receiver, msg,
           min(CASE WHEN op = 'recv' AND (exec_end IS NOT NULL OR gpu_end IS NOT NULL
                                          OR coalesce(api, '') NOT IN ('irecv', 'batch_isend_irecv'))
                    THEN coalesce(exec_end, gpu_end, cpu_end) END)
               OVER (PARTITION BY "group", sender, receiver, msg) AS recv_done
    FROM messages
),
-- each call's own span: the source's where it knows when the work ran, else the kernels', else
-- the host range. A call holding NCCL's communicator initialization (init_ns) starts its execution
-- where its kernel would have started without the init (never before the call): the init is
-- setup, but a rank that came late to the call stays late, and the init's own length, which
-- differs between ranks, names nobody. A send without kernels ends no later than its receive did
-- (p2p above); a receive that ended before its send began says the two ranks' clocks disagree,
-- and bounds nothing.
own AS NOT MATERIALIZED (
    SELECT call_id, report, pid, rank, device, stream, "group", cpu_start, gpu_start, seq, group_size,
           p.sender, p.receiver, p.msg,
           CASE WHEN coalesce(init_ns, 0) > 0
                THEN greatest(cpu_start, coalesce(exec_start, gpu_start, cpu_start) - init_ns)
                ELSE coalesce(exec_start, gpu_start, cpu_start) END AS own_start,
           CASE WHEN op = 'send' AND gpu_end IS NULL AND p.recv_done >= coalesce(exec_start, cpu_start)
                THEN least(coalesce(exec_end, cpu_end), p.recv_done)
                ELSE coalesce(exec_end, gpu_end, cpu_end) END AS x_end,
           CASE WHEN gpu_start IS NOT NULL THEN 'stream'
                WHEN source = 'wrapper' AND "group" IS NOT NULL AND op NOT IN ('send', 'recv') THEN 'group'
           END AS queue
    FROM numbered
    LEFT JOIN p2p p USING (call_id)
),
-- the queue each call waits in (docs/architecture.md, "Timing model": work issued to one queue
-- runs in order) and when it had a place free there: a call's execution cannot start before.
-- NCCL: its CUDA stream, one kernel at a time (the kernels' start already waits; the queue
-- tells how long the call waited behind the calls ahead). gloo: its process group, whose two
-- worker threads take the calls from one queue in the order enqueued, so a call starts once all
-- but one of the calls enqueued before it on the group have ended (the second latest end among
-- them). Point-to-point calls bypass gloo's queue (the caller's thread hands them to the
-- transport), so they wait in none.
-- Each queue's calls go through their own window only: computing both windows over every call
-- sorted every call twice. (call_id, queue_free; a call of no queue has no row)
queues AS (
    SELECT call_id, max(x_end) OVER (PARTITION BY rank, device, stream, CASE WHEN rank IS NULL THEN report END,
                                                  CASE WHEN rank IS NULL THEN pid END
                                     ORDER BY cpu_start, gpu_start, seq
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS queue_free
    FROM own WHERE $stream_queues AND queue = 'stream'
    UNION ALL
    SELECT call_id, (max(x_end, 2) OVER (PARTITION BY rank, "group", CASE WHEN rank IS NULL THEN report END,
                                                      CASE WHEN rank IS NULL THEN pid END
                                         ORDER BY cpu_start, seq
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))[2] AS queue_free
    FROM own WHERE $group_queues AND queue = 'group'
),
-- the execution span every analysis reads: the call's own, started no earlier than its queue let
-- it (never past its end); queued_ns: the part of the time from its enqueue (cpu_start) to its
-- execution that it waited behind the calls ahead of it on its queue
-- (a LEFT JOIN builds its right side, the narrow rows of the windows: combine/calls.py disables
-- the optimizer that would swap them)
spans AS (
    SELECT own.*, q.queue_free,
           CASE WHEN queue = 'group' AND q.queue_free > own_start
                THEN least(q.queue_free, coalesce(x_end, q.queue_free)) ELSE own_start END AS x_start
    FROM own
    LEFT JOIN queues q USING (call_id)
)
SELECT
    call_id,     -- the call (calls.call_id)
    seq,         -- its number among its communicator's calls of its op (the source's, else by order)
    group_size,  -- its communicator's size (the source's, else the ranks that share its seq)
    sender,      -- point-to-point: the sending rank (NULL for a collective)
    receiver,    -- point-to-point: the receiving rank (NULL for a collective)
    msg,         -- point-to-point: the message's number from sender to receiver (NULL for a collective)
    x_start,     -- the start of its execution span (ns)
    x_end,       -- the end of its execution span (ns; NULL: never seen to end)
    queue_free   -- when the calls ahead of it on its queue had ended (ns; NULL: no queue, or none ahead)
FROM spans
