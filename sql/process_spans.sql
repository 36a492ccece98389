-- Each process's first and last event (NVTX, CUDA API, kernels): its elapsed time, the
-- denominator of mpitrace's "% comm". Input: src_events (pid, start, end).
SELECT pid, min(start) AS first_ns, max("end") AS last_ns
FROM src_events
WHERE pid IS NOT NULL
GROUP BY pid
