-- Busy islands of the compute kernels per process and device, in DuckDB: for reports whose
-- compute kernels are too many for nsyscomm/ingest/busy.py's arrays (nsys/reader.py's fits_in_memory),
-- as DuckDB spills past its memory limit. The same islands as busy._islands: a kernel opens an
-- island when it starts after every earlier kernel of its device has ended.
-- Input: compute_kernels (pid, device, start, end; sql/compute_kernels.sql).
-- before: compute busy time of the device before the island.
-- One sort of the kernels: an island ends where the next one opens, at the latest end before
-- that opener (prev_end), and the last one at the device's latest end; so before, the sum of
-- the earlier islands' lengths, is a running sum of the openers' prev_end less one of their
-- starts: about half the time of numbering the islands by a second sort.
WITH flagged AS (
    SELECT pid, device, start,
           max("end") OVER (PARTITION BY pid, device ORDER BY start, "end"
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
           max("end") OVER (PARTITION BY pid, device) AS last_end
    FROM compute_kernels
),
openers AS (
    SELECT pid, device, start AS i_start, prev_end, last_end
    FROM flagged
    WHERE prev_end IS NULL OR start > prev_end
)
SELECT pid, device, i_start,
       coalesce(lead(prev_end) OVER w, last_end) AS i_end,
       -- the first opener has no prev_end (no kernel before it)
       (sum(coalesce(prev_end, 0)) OVER w
        - coalesce(sum(i_start) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::BIGINT AS before
FROM openers
WINDOW w AS (PARTITION BY pid, device ORDER BY i_start)
