-- The rows of sql/ranks.sql, whose parts of each rank's unions nsyscomm/analyses/spans.py adds
-- (comm_ns over (s, e), wait_ns over (s, we), per rank): a counted call's execution span and its
-- waiting (we: the end of its first (duration - its logical collective's latency), the time
-- before the last rank arrived), and for a call holding NCCL's init only that waiting, counted
-- as communication and as waiting (its exec_start leaves the init out, sql/collectives.sql).
-- Calls set aside whole as setup and calls that never completed are left out.
-- Inputs: collectives, logical_collectives.
WITH rows AS (
    SELECT c.rank, c.bytes, c.exec_start AS s, c.exec_end AS e, c.setup,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we
    FROM collectives c
    JOIN logical_collectives l
      ON l.logical_id = c.logical_id
    WHERE NOT l.whole_setup AND c.exec_start IS NOT NULL AND c.exec_end IS NOT NULL AND c.completed
)
SELECT rank,      -- the call's rank
       bytes,     -- its size (NULL for the init's waiting)
       s,         -- its execution's start (ns)
       e,         -- its execution's end, or for the init's waiting the end of that waiting (ns)
       we,        -- the end of its waiting for the last rank (ns)
       true AS counted  -- a call of its rank's count and bytes (not the init's waiting)
FROM rows WHERE NOT setup
UNION ALL
SELECT rank, NULL, s, we, we, false FROM rows WHERE setup AND we > s
