-- OS-runtime calls (nsys -t osrt: sleep, I/O, futex, poll, ...) long enough to explain a late
-- arrival at a collective, per process and thread, for the late-arrival diagnosis
-- (nsyscomm.analyses.late). Short calls are left out: a report holds millions of them and a
-- delay worth diagnosing is far longer than $min_ns.
-- Inputs: r.OSRT_API, r.StringIds of the attached report.
SELECT ((o.globalTid >> 24) & 16777215)::BIGINT AS pid,
       (o.globalTid & 16777215)::BIGINT         AS tid,
       o.start::BIGINT                          AS start,
       o."end"::BIGINT                          AS "end",
       s.value                                  AS name
FROM r.OSRT_API o
LEFT JOIN r.StringIds s ON s.id = o.nameId
WHERE o."end" - o.start >= $min_ns AND o.globalTid IS NOT NULL
