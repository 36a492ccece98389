-- The frontier of each communicator: per member rank, the last seq it entered and the last it
-- finished (NULL: none seen). Inputs: hang_calls, hang_members.
WITH f AS (
    SELECT "group", rank, max(seq) AS last_entered, max(seq) FILTER (WHERE finished) AS last_finished
    FROM hang_calls GROUP BY ALL
)
SELECT m."group", m.rank, f.last_entered, f.last_finished
FROM hang_members m LEFT JOIN f USING ("group", rank)
ORDER BY m."group", m.rank
