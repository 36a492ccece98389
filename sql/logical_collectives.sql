-- One row per logical collective: the calls of one communicator's seq-th operation on its ranks
-- (for point-to-point: one message, its send and its receive).
-- latency = the fastest rank's duration (the transfer itself, without waiting for late ranks).
-- setup: its calls set up their communicator (collectives.setup); whole_setup: its arrival skew is
-- set aside with it; first_meet: it is every
-- participant's first call; startup: a first meeting whose whole arrival skew is the ranks'
-- start-up (all three set after, by nsyscomm.combine.setup).
-- late_ns: the lateness counted at this collective, the part of its arrival skew (first to last
-- arrival) that its last rank had not already caused at an earlier collective on the same
-- communicator: a rank late to the first of several calls queued on a communicator delays each
-- of them, and is counted once, at the first; on host-timed collectives, less the part its last
-- rank was counted late in at collectives of other communicators (docs/architecture.md, "Timing
-- model").
-- completed: every call of it completed (collectives.completed); one that did not has no latency.
-- Input: collectives.
WITH previous AS (
    -- each call's rank's arrival before it on the same communicator (by time: a source's seq
    -- need not follow the clock); the window sorts only the columns it reads and the call's
    -- row number, by which the rest of the call joins back
    SELECT rowid AS row_id,
           lag(exec_start) OVER (PARTITION BY "group", pair, rank ORDER BY exec_start, seq) AS prev_arrival
    FROM collectives
),
arrivals AS (
    SELECT c.logical_id, c."group", c.pair, c.op, c.seq, c.bytes, c.group_size, c.caller, c.step, c.rank,
           c.exec_start, c.duration_ns, c.completed, c.init_ns, c.cpu_start, c.cpu_end, c.joined, p.prev_arrival,
           c.gpu_start, c.source
    FROM collectives c JOIN previous p ON p.row_id = c.rowid
),
logical AS (
SELECT
    logical_id,
    any_value("group")                          AS "group",
    any_value(pair)                             AS pair,
    max(op)                                     AS op,   -- a message: 'send' (its send and receive)
    min(seq)                                    AS seq,
    min(bytes)                                  AS bytes,
    min(group_size)                             AS group_size,
    min(caller)                                 AS caller,
    min(step)                                   AS step,
    count(*)                                    AS participants,
    min(duration_ns)                            AS latency_ns,
    min(exec_start)         AS first_arrival,
    -- a message: a receive waits for its send, a send for nobody (it is buffered); a receive that
    -- starts first waited for the sender, which is the one late; a late receive kept nobody waiting
    coalesce(max(exec_start) FILTER (WHERE op = 'send' AND pair IS NOT NULL), max(exec_start)) AS last_arrival,
    CASE WHEN count(*) FILTER (WHERE op = 'send' AND pair IS NOT NULL) > 0
         THEN arg_max(rank, exec_start) FILTER (WHERE op = 'send' AND pair IS NOT NULL)
         -- tie on arrival: the smallest rank is named
         ELSE arg_max(rank, (exec_start, -rank)) END AS last_rank,
    -- the last rank's arrival at the collective before this one (the same choice of call)
    CASE WHEN count(*) FILTER (WHERE op = 'send' AND pair IS NOT NULL) > 0
         THEN arg_max_null(prev_arrival, exec_start) FILTER (WHERE op = 'send' AND pair IS NOT NULL)
         ELSE arg_max_null(prev_arrival, (exec_start, -rank)) END AS last_prev_arrival,
    bool_and(completed)                         AS completed,
    -- timed on its ranks' hosts by the calls' own ranges (gloo, MPI): a thread runs one at a time
    bool_and(gpu_start IS NULL AND source IN ('wrapper', 'torch_range')) AS host_timed,
    -- for sql/setup_calls.sql: the call's time on its fastest rank, host or device, the longer
    -- (NCCL initializes a communicator on the host, before the kernel; the execution span of a
    -- call holding the init counts it, sql/collectives.sql: taken back out here), and NCCL's init
    min(greatest(duration_ns - coalesce(init_ns, 0), coalesce(cpu_end - cpu_start, 0))) AS took_ns,
    max(init_ns)                                AS init_ns,
    false                                       AS setup,   -- set by nsyscomm.combine.setup
    -- setup, its arrival skew too: set aside by its length, with no NCCL init range to tell the
    -- init from a late rank (a call holding one is setup for its time only: its calls' exec_start
    -- leaves the init out, sql/collectives.sql, and its skew is lateness)
    false                                       AS whole_setup,
    false                                       AS startup,
    false                                       AS first_meet,  -- every participant's first call
    -- a participant had joined under torch.distributed.algorithms.Join (collectives.joined): a
    -- shadow of the ranks still training, whose arrival skew is the joined rank's absence, not
    -- lateness (nsyscomm/combine/joined.py)
    bool_or(joined IS NOT NULL)                 AS shadow
FROM arrivals
GROUP BY logical_id
),
-- each collective's lateness window: from its first arrival (or its last rank's arrival at the
-- collective before on the communicator, when later) to its last arrival
windows AS MATERIALIZED (
    SELECT * EXCLUDE (last_prev_arrival),
           greatest(first_arrival, coalesce(last_prev_arrival, first_arrival)) AS late_from,
           greatest(0, last_arrival - late_from)                               AS window_ns
    FROM logical
)
-- less, where its ranks are timed on the host, the part of it its last rank was already counted
-- late in at the earlier collectives it came last to on any communicator (a rank in overlapping
-- groups keeps a partner waiting on two communicators with one delay): the windows of that rank
-- that ended inside this one, less the part of the first of them before this one began (a thread's
-- windows follow each other; a device's streams overlap theirs: there no window is taken off, and
-- the window functions run over the host-timed collectives only)
SELECT * EXCLUDE (host_timed, late_from, window_ns), window_ns::BIGINT AS late_ns
FROM windows WHERE host_timed IS NOT TRUE
UNION ALL BY NAME
SELECT * EXCLUDE (host_timed, late_from, window_ns, counted_ns, counted_from),
       greatest(0, window_ns - coalesce(counted_ns, 0) + greatest(0, late_from - coalesce(counted_from, late_from)))
           ::BIGINT AS late_ns
FROM (
    SELECT *,
           sum(window_ns) OVER counted_in::BIGINT AS counted_ns,
           min(late_from) OVER counted_in         AS counted_from
    FROM windows
    WHERE host_timed
    WINDOW counted_in AS (
        PARTITION BY last_rank ORDER BY last_arrival
        RANGE BETWEEN greatest(window_ns - 1, 0) PRECEDING AND 1 PRECEDING
    )
)
