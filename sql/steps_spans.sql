-- The rows of sql/steps.sql, whose parts of each rank's union in each step
-- nsyscomm/analyses/spans.py adds (ns over (s, e), per step and rank): the calls of a known
-- step, not setting up their communicator, that completed. Input: collectives.
SELECT step,              -- the call's training step
       rank,              -- its rank
       exec_start AS s,   -- its execution's start (ns)
       exec_end AS e      -- its execution's end (ns)
FROM collectives WHERE step IS NOT NULL AND NOT setup AND exec_start IS NOT NULL AND completed
