-- Calls at the same (communicator, seq) that differ across ranks, in Flight Recorder's classes:
-- op, message size, dtype, group membership. All-to-all sizes may differ by design (uneven
-- splits): not compared. Flight Recorder's fifth class, state (finished on some ranks, not on
-- others), is not one here: a call that raised is recorded as finished (the wrapper closes its
-- range either way), so the ranks of a collective that failed would differ in state without any
-- desync. A member missing from a collective is hang_blocked's. One row per (group, seq, field, rank).
-- Inputs: hang_calls.
WITH v AS (
    SELECT "group", seq, 'op' AS field, rank, op AS value FROM hang_calls
    UNION ALL SELECT "group", seq, 'bytes', rank, bytes::VARCHAR FROM hang_calls
        WHERE op <> 'all_to_all' AND bytes IS NOT NULL
    UNION ALL SELECT "group", seq, 'dtype', rank, dtype FROM hang_calls WHERE dtype IS NOT NULL AND dtype <> ''
    UNION ALL SELECT "group", seq, 'group_membership', rank, group_size::VARCHAR || ':' || group_ranks
        FROM hang_calls WHERE group_size IS NOT NULL
),
bad AS (SELECT "group", seq, field FROM v GROUP BY ALL HAVING count(DISTINCT value) > 1)
SELECT v."group", v.seq, v.field, v.rank, v.value
FROM v JOIN bad USING ("group", seq, field)
ORDER BY v."group", v.seq, v.field, v.rank
