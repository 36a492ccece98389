-- Per rank, the steady figures the gate compares (docs/gate.md, "Start-up and warm-up stay out"):
-- over the calls outside the warm-up steps ($warmup: their numbers, comma-separated, from
-- nsyscomm.analyses.warmup), the setup calls
-- the job's first meetings and the calls that never completed left out: what the processes did before their steady state (lazy
-- loading in a first backward pass, a checkpoint load) is no communication. comm_ms: the calls'
-- time; wait_ms: beyond their collective's latency; avg_arrival_delay_ms: arrival after the first
-- rank, over collectives of two ranks or more. The job's last step is left out too when it holds
-- fewer calls than the median step: no training step, what runs after the last optimizer step
-- (the teardown's barrier, where a rank waited 4.4 s for no communication in one of ten unchanged
-- runs on a loaded host). The rows (sql/steady_ranks_spans.sql, which reads $warmup) come as
-- `spans`, each with its part of its rank's unions (nsyscomm/analyses/spans.py): comm and wait
-- as sql/ranks.sql counts them, calls in flight together once. Input: spans.
SELECT rank, count(*) AS calls, sum(comm_part) / 1e6 AS comm_ms, sum(wait_part) / 1e6 AS wait_ms,
       avg(delay_ns) / 1e6 AS avg_arrival_delay_ms
FROM spans GROUP BY rank ORDER BY rank
