-- Communicators that are stuck: the first collective not every member entered (some member
-- entered and did not finish it),
-- the members waiting in it, and the members that never reached it (missing) with the last call
-- they made on that communicator. One row per (communicator, missing or waiting rank); a
-- communicator whose members all waiting is listed with role 'waiting' only.
-- Inputs: hang_calls, hang_members.
WITH fr AS (
    SELECT m."group", m.rank, max(c.seq) AS last_entered
    FROM hang_members m LEFT JOIN hang_calls c ON c."group" = m."group" AND c.rank = m.rank
    GROUP BY ALL
),
-- the first seq some member has not entered (what the others cannot complete), or, when all
-- entered the furthest one, that one (a member with no call seen, its calls out of the window
-- of a Flight Recorder dump, is missing but does not move the seq)
top AS (
    SELECT "group", least(min(last_entered + 1), max(last_entered)) AS seq
    FROM fr GROUP BY 1 HAVING max(last_entered) IS NOT NULL
),
-- stuck: a call at or after that seq was entered and not finished (Flight Recorder queues
-- collectives ahead, so the unfinished one may be a later one); or, in a Flight Recorder dump
-- (a snapshot taken at the failure), members stand at different seqs: gloo marks a collective
-- that timed out "completed", so a dump's states alone do not show where it stuck
open_calls AS (SELECT "group", max(seq) AS seq FROM hang_calls WHERE NOT finished GROUP BY 1),
split AS (
    SELECT "group" FROM fr GROUP BY 1
    HAVING count(DISTINCT coalesce(last_entered, -1)) > 1
       AND "group" IN (SELECT "group" FROM hang_calls WHERE source = 'flight_recorder')
),
at_top AS (
    SELECT t."group", t.seq, c.op, c.bytes, c.t_enter,
           count(*) OVER (PARTITION BY t."group", t.seq, c.op)    AS op_n,
           count(*) OVER (PARTITION BY t."group", t.seq, c.bytes) AS bytes_n,
           -coalesce(c.t_enter, 9223372036854775807)              AS early
    FROM top t
    JOIN hang_calls c ON c."group" = t."group" AND c.seq = t.seq
    WHERE t."group" IN (SELECT o."group" FROM open_calls o WHERE o.seq >= t.seq)
       OR t."group" IN (SELECT "group" FROM split)
),
-- the op and message size most of its calls have; on a tie (an all-to-all's uneven sizes, all
-- legal), the first-entered call's: the same every run, where mode() took any of them
stuck AS (
    SELECT "group", seq,
           arg_max(op, (op_n, early, op)) FILTER (WHERE op IS NOT NULL)          AS op,
           arg_max(bytes, (bytes_n, early, bytes)) FILTER (WHERE bytes IS NOT NULL) AS bytes,
           min(t_enter)                                                       AS t_first
    FROM at_top GROUP BY "group", seq
),
last_call AS (
    SELECT c."group", c.rank, c.op, c.seq, c.caller, c.finished,
           -- a seq held twice by a rank: the one entered last, the same every run
           row_number() OVER (PARTITION BY c."group", c.rank
                              ORDER BY c.seq DESC, c.t_enter DESC NULLS LAST, c.op, c.caller) AS k
    FROM hang_calls c
)
SELECT s."group", s.seq, s.op, s.bytes, s.t_first, fr.rank,
       CASE WHEN fr.last_entered IS NULL OR fr.last_entered < s.seq THEN 'missing'
            ELSE 'waiting' END AS role,
       l.op AS last_op, l.seq AS last_seq, l.caller, l.finished AS last_finished
FROM stuck s
JOIN fr ON fr."group" = s."group"
LEFT JOIN last_call l ON l."group" = s."group" AND l.rank = fr.rank AND l.k = 1
ORDER BY s.t_first NULLS LAST, s."group", fr.rank
