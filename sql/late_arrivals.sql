-- Late arrivals at logical collectives, with what the late rank did before it (nsyscomm.analyses.late).
-- A collective is late when its last rank arrives more than $noise_ns after its first. For the
-- late rank and for every other participant: the gap since its previous call on the same rank
-- (arrival minus the previous call's end), the host gap (cpu_start minus the previous call's
-- cpu_end: when the CPU came to launch it), the compute-kernel busy time in the device gap (B(t) of
-- nsyscomm/ingest/busy.py: busy_at_start minus the previous call's busy_at_end; NULL without
-- kernels), and for the late rank the OS-runtime calls of the calling thread in the host gap
-- (previous call's cpu_end to this call's cpu_start), clipped to it; likewise the program's own
-- NVTX ranges on that thread, except those that enclose the whole host gap (a "train_step" range
-- around both calls explains nothing): nvtx_ns is the longest one's share of the gap (nested
-- ranges would count twice in a sum).
-- For a late rank on a device, the compute kernels queued ahead of the call since the previous one,
-- by name (gap_kernels: the TOP names per call, nsyscomm/ingest/gap_kernels.py), against the same
-- names on the other ranks (their median; a name not among another rank's top counts 0 there):
-- slower_kernels, the three that ran longest beyond the others, each explaining at least 5% of the
-- late rank's extra busy time (a few microseconds of jitter on a 1 ms excess names nothing).
-- Inputs: collectives, logical_collectives, host_calls, host_ranges, osrt_reports, gap_kernels,
-- gap_kernel_names, gap_kernel_reports.
WITH timeline AS (
    SELECT rank, report, pid, tid, device, gpu_start, logical_id, caller, cpu_start,
           coalesce(gpu_start, cpu_start)                                   AS arrive,
           lag(coalesce(gpu_end, cpu_end)) OVER w                           AS prev_done,
           lag(cpu_end) OVER w                                              AS prev_cpu_end,
           lag(logical_id) OVER w                                           AS prev_logical,
           cpu_start - lag(cpu_end) OVER w                                  AS host_gap,
           gpu_start IS NOT NULL                                            AS on_device,
           busy_at_start - lag(busy_at_end) OVER w                          AS busy_gap
    FROM collectives
    -- (a call's previous one: calls that tie on time ordered by their collective, the same every run)
    WINDOW w AS (PARTITION BY rank ORDER BY coalesce(gpu_start, cpu_start), cpu_start, logical_id)
),
late AS (
    SELECT * FROM logical_collectives
    WHERE participants >= 2 AND last_arrival - first_arrival > $noise_ns
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
    SELECT l.logical_id, l."group", l.seq, l.op, l.step, l.last_arrival - l.first_arrival AS delay,
           l.first_arrival, l.last_arrival,
           t.rank, t.report, t.pid, t.tid, t.caller, t.cpu_start, t.prev_cpu_end, t.prev_logical,
           t.arrive - t.prev_done AS gap, t.host_gap, t.on_device, t.busy_gap,
           o.gap AS others_gap, o.host_gap AS others_host_gap, o.busy_gap AS others_busy_gap,
           t.report IN (SELECT report FROM osrt_reports) AS has_osrt,
           t.report IN (SELECT report FROM gap_kernel_reports) AS has_gap_kernels
    FROM late l
    JOIN timeline t ON t.logical_id = l.logical_id AND t.rank = l.last_rank
    LEFT JOIN others o ON o.logical_id = l.logical_id
),
host AS (
    SELECT r.logical_id, h.name,
           sum(least(h."end", r.cpu_start) - greatest(h.start, r.prev_cpu_end)) AS ns
    FROM late_rank r
    JOIN host_calls h ON h.report = r.report AND h.pid = r.pid AND h.tid = r.tid
         AND h."end" > r.prev_cpu_end AND h.start < r.cpu_start
    GROUP BY ALL
),
user_ranges AS (
    SELECT r.logical_id, h.name,
           max(least(h."end", r.cpu_start) - greatest(h.start, r.prev_cpu_end)) AS ns
    FROM late_rank r
    JOIN host_ranges h ON h.report = r.report AND h.pid = r.pid AND h.tid = r.tid
         AND h."end" > r.prev_cpu_end AND h.start < r.cpu_start
         AND NOT (h.start <= r.prev_cpu_end AND h."end" >= r.cpu_start)
    GROUP BY ALL
),
member_kernels AS (  -- names are per report (StringIds): joined here, for late collectives only
    SELECT m.logical_id, m.rank, m.is_late, n.name, g.ns
    FROM members m
    JOIN gap_kernels g ON g.report = m.report AND g.pid = m.pid AND g.device = m.device
         AND g.gpu_start = m.gpu_start
    JOIN gap_kernel_names n ON n.report = g.report AND n.name_id = g.name_id
),
kernel_extra AS (
    SELECT k.logical_id, k.name, any_value(k.ns) - median(coalesce(o.ns, 0)) AS extra
    FROM member_kernels k
    JOIN members m ON m.logical_id = k.logical_id AND NOT m.is_late
    LEFT JOIN member_kernels o ON o.logical_id = k.logical_id AND o.rank = m.rank AND o.name = k.name
    WHERE k.is_late
    GROUP BY ALL
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
