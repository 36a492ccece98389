-- Each call of the job (the view calls) with its process's rank, local rank and host (proc_ranks:
-- report, pid -> rank, local_rank, host; chosen in nsyscomm/combine/ranks.py) and, for a
-- point-to-point call, the pair of ranks it joins ("lo-hi"). A view (combine/calls.py): the two
-- queries that read it (sql/call_spans.sql, sql/collectives.sql) recompute the join, which is
-- cheaper than storing the wide rows once more.
SELECT c.*, m.rank, m.local_rank, m.host,
       CASE WHEN c.op IN ('send', 'recv') AND c.peer IS NOT NULL AND m.rank IS NOT NULL
            THEN least(m.rank, c.peer) || '-' || greatest(m.rank, c.peer) END AS pair
FROM calls c
LEFT JOIN proc_ranks m ON m.report = c.report AND m.pid = c.pid
