-- Logical collectives seen on fewer ranks than their communicator has (a rank missing from the
-- input, or a call cut by the capture window), with the ranks that were seen. Point-to-point
-- messages have one call per side by nature and are left out. Inputs: collectives, logical_collectives.
SELECT l.op, l."group", l.seq, l.step, l.bytes, l.group_size, l.participants,
       string_agg(c.rank::VARCHAR, ',' ORDER BY c.rank) AS ranks_seen
FROM logical_collectives l
JOIN collectives c ON c.logical_id = l.logical_id
WHERE l.participants < l.group_size AND l.op NOT IN ('send', 'recv')
GROUP BY ALL
ORDER BY l."group" NULLS FIRST, l.op, l.seq
