-- The waiting each logical collective's last rank caused: the time every other participant spent
-- between its own arrival and the last one (arrivals at the execution start, as everywhere). For a
-- point-to-point message the last arrival is its send's start, so a receive posted before it
-- waited for the sender, and one posted later waited for nobody (nothing below zero counts).
-- Read with the Diagnosis' late arrivals (nsyscomm.analyses.late.straggler_order): the straggler
-- is the rank whose late arrivals kept the others waiting longest. Inputs: collectives,
-- logical_collectives.
SELECT l.logical_id,                                                   -- one logical collective
       any_value(l.last_rank)                                 AS last_rank,  -- who came last to it
       sum(greatest(l.last_arrival - c.exec_start, 0))        AS caused_ns   -- its participants' waiting for that rank
FROM logical_collectives l
JOIN collectives c ON c.logical_id = l.logical_id
WHERE l.participants >= 2
GROUP BY l.logical_id
