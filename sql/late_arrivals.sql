-- Late arrivals at logical collectives, with what the late rank did before it (nsyscomm.analyses.late).
-- A collective is late when its last rank arrives more than $noise_ns after its first, counted
-- once (logical_collectives.late_ns: a rank late to the first of several calls queued on one
-- communicator is late at the first, not again at each call queued behind it), and it completed
-- (one that never did belongs to the hang diagnosis). For the
-- late rank and for every other participant: the gap since its previous call on the same rank
-- (arrival minus the previous call's end), the host gap (cpu_start minus the previous call's
-- cpu_end: when the CPU came to launch it), the compute-kernel busy time in the device gap (B(t) of
-- nsyscomm/ingest/busy.py: busy_at_start minus the previous call's busy_at_end; NULL without
-- kernels), and for the late rank the OS-runtime calls of the calling thread in the host gap
-- (previous call's cpu_end to this call's cpu_start), clipped to it, except those inside the
-- rank's waits for its own asynchronous calls (wait_start, wait_end); likewise the program's own
-- NVTX ranges on that thread, except those that enclose the whole host gap (a "train_step" range
-- around both calls explains nothing): nvtx_ns is the longest one's share of the gap (nested
-- ranges would count twice in a sum).
-- For a late rank on a device, the compute kernels queued ahead of the call since the previous one,
-- by name (gap_kernels: the TOP names per call, nsyscomm/ingest/nsys/gap_kernels.py), against the same
-- names on the other ranks (the median over their calls; a name not among a call's top counts 0 there):
-- slower_kernels, the three that ran longest beyond the others, each explaining at least 5% of the
-- late rank's extra busy time (a few microseconds of jitter on a 1 ms excess names nothing).
-- Inputs: collectives, logical_collectives, host_calls, host_ranges, osrt_reports, gap_kernels,
-- gap_kernel_names, gap_kernel_reports, rank_spans.
-- A rank's first call is measured from the rank's first recorded event (rank_spans.first_ns: its
-- start, or the capture window's opening), so that what it did before it first met the others (a
-- checkpoint load, a first batch) is named like any other gap.
-- The window sorts every column it carries: it numbers each call's previous one on its rank over
-- the few columns it reads, and the rest of each call of a late collective joins back by rowid.
WITH previous AS (
    SELECT rowid AS row_id, logical_id,
           lag(exec_end) OVER w     AS prev_exec_end,
           lag(cpu_end) OVER w      AS prev_cpu_end,
           lag(logical_id) OVER w   AS prev_logical,
           lag(busy_at_end) OVER w  AS prev_busy_at_end
    FROM collectives
    -- (a call's previous one: calls that tie on time ordered by their collective, the same every run)
    WINDOW w AS (PARTITION BY rank ORDER BY exec_start, cpu_start, logical_id)
),
late AS (
    SELECT * FROM logical_collectives
    -- calls set aside whole as setup and start-up collectives (whose whole skew is the processes'
    -- start-up) name no late rank; a call holding NCCL's init does (its arrivals leave the init out)
    WHERE participants >= 2 AND late_ns > $noise_ns AND completed AND NOT whole_setup AND NOT startup AND NOT shadow
),
timeline AS (  -- the calls of the late collectives, each with its previous call on its rank
    SELECT c.rank, c.report, c.pid, c.tid, c.device, c.gpu_start, c.logical_id, c.caller, c.cpu_start, c.source,
           c.exec_start                                                     AS arrive,
           coalesce(p.prev_exec_end, s.first_ns)                            AS prev_done,
           coalesce(p.prev_cpu_end, s.first_ns)                             AS prev_cpu_end,
           p.prev_logical,
           c.cpu_start - coalesce(p.prev_cpu_end, s.first_ns)               AS host_gap,
           c.gpu_start IS NOT NULL                                          AS on_device,
           c.busy_at_start - CASE WHEN p.prev_logical IS NULL THEN 0 ELSE p.prev_busy_at_end END
                                                                            AS busy_gap
    FROM (SELECT * FROM previous SEMI JOIN late USING (logical_id)) p
    JOIN collectives c ON c.rowid = p.row_id
    LEFT JOIN rank_spans s ON s.rank = c.rank
),
members AS (
    SELECT l.logical_id, t.rank, t.rank = l.last_rank AS is_late, t.report, t.pid, t.device, t.gpu_start,
           t.arrive - t.prev_done AS gap, t.host_gap, t.busy_gap
    FROM late l JOIN timeline t ON t.logical_id = l.logical_id
),
others AS (
    SELECT logical_id, median(gap) AS gap, median(host_gap) AS host_gap, median(busy_gap) AS busy_gap
    FROM members WHERE NOT is_late GROUP BY logical_id
),
late_rank AS (
    SELECT l.logical_id, l."group", l.seq, l.op, l.step, l.late_ns AS delay,
           l.first_arrival, l.last_arrival,
           t.rank, t.report, t.pid, t.tid, t.caller, t.cpu_start, t.prev_cpu_end, t.prev_logical,
           t.arrive - t.prev_done AS gap, t.host_gap, t.on_device, t.busy_gap,
           o.gap AS others_gap, o.host_gap AS others_host_gap, o.busy_gap AS others_busy_gap,
           t.report IN (SELECT report FROM osrt_reports) AS has_osrt,
           -- annotated by nsyscomm's wrapper: profiled by nsyscomm run, whose presets say what nsys traced
           t.source = 'wrapper'                        AS by_wrapper,
           t.report IN (SELECT report FROM gap_kernel_reports) AS has_gap_kernels
    FROM late l
    JOIN timeline t ON t.logical_id = l.logical_id AND t.rank = l.last_rank
    LEFT JOIN others o ON o.logical_id = l.logical_id
),
-- The OS-runtime calls and NVTX ranges that overlap each late rank's host gap (prev_cpu_end,
-- cpu_start). Joined on the thread alone with the gap as a filter, every late arrival met every
-- event of its thread: 60M pairs for a 2-rank gloo job of 10,000 calls, growing with the square
-- of the job's length (docs/performance.md). Instead the events that overlap a gap are found in three
-- disjoint parts, each a run of consecutive numbers in one order of the thread's events:
--   a. starting inside the gap: by start (i), after the last start <= prev_cpu_end, up to the
--      last start < cpu_start;
--   b. starting before it and ending inside it: by end (j), after the last end <= prev_cpu_end,
--      up to the last end < cpu_start, those that start <= prev_cpu_end;
--   c. starting before it and ending after it (enclosing it): by start, from the first whose
--      latest end so far reaches cpu_start up to the last start <= prev_cpu_end, those that end
--      >= cpu_start. Only OS-runtime calls: an enclosing NVTX range is no cause. A thread's
--      OS-runtime calls do not nest, so this run is short; NVTX ranges do ("train_step").
-- Each bound is an ASOF join; the events are then joined by their number.
host_events_all AS (
    SELECT 'osrt' AS kind, report, pid, tid, start, "end", name FROM host_calls
    UNION ALL
    SELECT 'nvtx' AS kind, report, pid, tid, start, "end", name FROM host_ranges
),
event_threads AS (  -- the (kind, thread)s with events and late arrivals, each one number: a cheap sort key
    SELECT *, row_number() OVER (ORDER BY report, pid, tid, kind) AS th
    FROM (SELECT DISTINCT kind, report, pid, tid FROM host_events_all
          SEMI JOIN (SELECT report, pid, tid FROM late_rank WHERE prev_cpu_end IS NOT NULL) USING (report, pid, tid))
),
host_events AS (
    SELECT t.th, e.kind, e.start, e."end", e.name,
           row_number() OVER by_start                                                      AS i,
           max(e."end") OVER (by_start ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)   AS end_so_far,
           row_number() OVER (PARTITION BY t.th ORDER BY e."end", e.start, e.name)         AS j
    FROM host_events_all e JOIN event_threads t USING (kind, report, pid, tid)
    WHERE e.start IS NOT NULL AND e."end" IS NOT NULL
    WINDOW by_start AS (PARTITION BY t.th ORDER BY e.start, e."end", e.name)
),
event_starts AS (SELECT th, start, max(i) AS i FROM host_events GROUP BY ALL),
event_ends AS (SELECT th, "end", max(j) AS j FROM host_events GROUP BY ALL),
event_reach AS (SELECT th, end_so_far, max(i) AS i FROM host_events GROUP BY ALL),
gap_bounds AS (  -- per late arrival and kind: the last event numbers before each edge of its gap
    SELECT r.logical_id, t.kind, t.th, r.prev_cpu_end, r.cpu_start,
           coalesce(s1.i, 0) AS starts_to_prev, coalesce(s2.i, 0) AS starts_to_cpu,
           coalesce(e1.j, 0) AS ends_to_prev, coalesce(e2.j, 0) AS ends_to_cpu,
           coalesce(m.i, 0) AS reach_short_of_cpu
    FROM late_rank r JOIN event_threads t USING (report, pid, tid)
    ASOF LEFT JOIN event_starts s1 ON s1.th = t.th AND s1.start <= r.prev_cpu_end
    ASOF LEFT JOIN event_starts s2 ON s2.th = t.th AND s2.start < r.cpu_start
    ASOF LEFT JOIN event_ends e1 ON e1.th = t.th AND e1."end" <= r.prev_cpu_end
    ASOF LEFT JOIN event_ends e2 ON e2.th = t.th AND e2."end" < r.cpu_start
    ASOF LEFT JOIN event_reach m ON m.th = t.th AND m.end_so_far < r.cpu_start
    WHERE r.prev_cpu_end IS NOT NULL AND r.cpu_start IS NOT NULL
),
by_start AS (  -- parts a and c, by start number
    SELECT *, unnest(range(starts_to_prev + 1, starts_to_cpu + 1)) AS i FROM gap_bounds
    UNION ALL
    SELECT *, unnest(range(reach_short_of_cpu + 1, starts_to_prev + 1)) AS i FROM gap_bounds WHERE kind = 'osrt'
),
by_end AS (  -- part b, by end number
    SELECT *, unnest(range(ends_to_prev + 1, ends_to_cpu + 1)) AS j FROM gap_bounds
),
in_gap AS (  -- the overlap itself is checked again: a gap can be inverted (the previous call
            -- ended after this one began), and then only part c's run holds what overlaps
    SELECT g.logical_id, g.kind, h.name, h.start, h."end", g.prev_cpu_end, g.cpu_start
    FROM by_start g JOIN host_events h ON h.th = g.th AND h.i = g.i
    WHERE h."end" > g.prev_cpu_end AND h.start < g.cpu_start
          AND (h.start > g.prev_cpu_end OR h."end" >= g.cpu_start)  -- a, or c
    UNION ALL
    SELECT g.logical_id, g.kind, h.name, h.start, h."end", g.prev_cpu_end, g.cpu_start
    FROM by_end g JOIN host_events h ON h.th = g.th AND h.j = g.j
    WHERE h."end" > g.prev_cpu_end AND h.start < g.cpu_start AND h.start <= g.prev_cpu_end  -- b
),
own_waits AS (  -- the caller blocked on its own asynchronous call (Work.wait, wait_tensor)
    SELECT report, pid, tid, wait_start, wait_end FROM collectives WHERE wait_start IS NOT NULL
),
host AS (
    -- an OS-runtime call inside such a wait is that call's communication (its own execution
    -- span), not what kept the rank from arriving
    SELECT g.logical_id, g.name, sum(least(g."end", g.cpu_start) - greatest(g.start, g.prev_cpu_end)) AS ns
    FROM in_gap g JOIN late_rank r ON r.logical_id = g.logical_id
    WHERE g.kind = 'osrt'
      AND NOT EXISTS (SELECT 1 FROM own_waits w
                      WHERE w.report = r.report AND w.pid = r.pid AND w.tid = r.tid
                        AND g.start >= w.wait_start AND g."end" <= w.wait_end)
    GROUP BY ALL
),
user_ranges AS (
    SELECT logical_id, name, max(least("end", cpu_start) - greatest(start, prev_cpu_end)) AS ns
    FROM in_gap WHERE kind = 'nvtx' GROUP BY ALL
),
kernel_names AS (  -- names are per report (StringIds): each name one number across the job
    SELECT report, name_id, name, CASE WHEN name IS NOT NULL THEN dense_rank() OVER (ORDER BY name) END AS name_no
    FROM gap_kernel_names
),
member_kernels AS (  -- joined here, for late collectives only
    SELECT m.logical_id, m.rank, m.is_late, n.name_no, g.ns
    FROM members m
    JOIN gap_kernels g ON g.report = m.report AND g.pid = m.pid AND g.device = m.device
         AND g.gpu_start = m.gpu_start
    JOIN kernel_names n ON n.report = g.report AND n.name_id = g.name_id
),
kernel_extra AS (  -- per late collective and kernel name of its late rank: how much longer it ran
    -- there than the median of the other members' calls, each call its time of that name or 0:
    -- one pass over the members' kernels gathers the late call's time and the others' times, where
    -- pairing each late kernel with every other member and looking its name up in that member's
    -- kernels is a join as large as the members' kernels
    SELECT e.logical_id, n.name, e.extra
    FROM (SELECT k.logical_id, k.name_no,
                 k.ns - list_median(list_concat(k.others, list_resize([0], c.calls - len(k.others), 0))) AS extra
          FROM (SELECT logical_id, name_no, any_value(ns) FILTER (WHERE is_late) AS ns,
                       coalesce(list(coalesce(ns, 0)) FILTER (WHERE NOT is_late), []) AS others
                FROM member_kernels GROUP BY logical_id, name_no HAVING bool_or(is_late)) k
          JOIN (SELECT logical_id, count(*) AS calls FROM members WHERE NOT is_late GROUP BY logical_id) c
            ON c.logical_id = k.logical_id) e
    LEFT JOIN (SELECT DISTINCT name_no, name FROM kernel_names) n ON n.name_no = e.name_no
)
SELECT r.*,
       (SELECT string_agg(name || ' +' || round(extra / 1e6, 3) || ' ms', ', ' ORDER BY extra DESC, name)
        FROM (SELECT * FROM kernel_extra k WHERE k.logical_id = r.logical_id AND extra > 0
                AND extra >= 0.05 * (r.busy_gap - coalesce(r.others_busy_gap, 0))
              ORDER BY extra DESC, name LIMIT 3))                                                 AS slower_kernels,
       (SELECT max(ns) FROM user_ranges u WHERE u.logical_id = r.logical_id)                AS nvtx_ns,
       (SELECT string_agg(name || ' ' || round(ns / 1e6, 1) || ' ms', ', ' ORDER BY ns DESC, name)
        FROM (SELECT * FROM user_ranges u WHERE u.logical_id = r.logical_id ORDER BY ns DESC, name LIMIT 3)) AS nvtx_ranges,
       (SELECT sum(ns) FROM host h WHERE h.logical_id = r.logical_id)                       AS osrt_ns,
       (SELECT string_agg(name || ' ' || round(ns / 1e6, 1) || ' ms', ', ' ORDER BY ns DESC, name)
        FROM host h WHERE h.logical_id = r.logical_id)                                      AS osrt_calls
FROM late_rank r
-- ties broken by the collective, so that equal delays come out in the same order every run
ORDER BY r.rank, r.delay DESC, r."group", r.seq
