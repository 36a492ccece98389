-- The (communicator, seq) keys whose calls may differ across ranks, for sql/hang_mismatches.sql:
-- one 64-bit hash of the compared fields per call (op, message size but an all-to-all's, dtype,
-- group membership), its min and max per key; a key held by one call, or whose calls all hash
-- alike, is left out (two calls that differ hash alike once in 2^64). One pass and one small
-- aggregation over the calls: the hang diagnosis runs the exact comparison only when this finds
-- a key.
-- Columns: group (the communicator), seq (its collective's sequence number).
-- Inputs: hang_calls.
SELECT "group", seq
FROM (SELECT "group", seq,
             hash(op, CASE WHEN op <> 'all_to_all' THEN bytes END, nullif(dtype, ''), group_size, group_ranks) AS h
      FROM hang_calls)
GROUP BY ALL
HAVING count(*) > 1 AND min(h) <> max(h)
