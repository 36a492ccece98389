-- Calls at the same (communicator, seq) that differ across ranks, in Flight Recorder's classes:
-- op, message size, dtype, group membership, state (some ranks finished it, others did not,
-- while a member is missing from it is not a mismatch: see hang_blocked). All-to-all sizes may
-- differ by design (uneven splits): not compared. One row per (group, seq, field, rank).
-- Inputs: hang_calls.
WITH v AS (
    SELECT "group", seq, 'op' AS field, rank, op AS value FROM hang_calls
    UNION ALL SELECT "group", seq, 'bytes', rank, bytes::VARCHAR FROM hang_calls
        WHERE op <> 'all_to_all' AND bytes IS NOT NULL
    UNION ALL SELECT "group", seq, 'dtype', rank, dtype FROM hang_calls WHERE dtype IS NOT NULL AND dtype <> ''
    UNION ALL SELECT "group", seq, 'group_membership', rank, group_size::VARCHAR || ':' || group_ranks
        FROM hang_calls WHERE group_size IS NOT NULL
    UNION ALL SELECT "group", seq, 'state', rank, CASE WHEN finished THEN 'finished' ELSE 'entered' END
        FROM hang_calls WHERE source = 'record'   -- a dump's states lag by design (queued ahead)
),
bad AS (SELECT "group", seq, field FROM v GROUP BY ALL HAVING count(DISTINCT value) > 1)
SELECT v."group", v.seq, v.field, v.rank, v.value
FROM v JOIN bad USING ("group", seq, field)
ORDER BY v."group", v.seq, v.field, v.rank
