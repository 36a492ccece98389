-- Each call's step, in the order of the rows of call_rows (the parts of sql/calls_nsys.sql, every
-- call of the report): the wrapper's label (step) where it saw step boundaries in the call's
-- process ($saw: those processes, sql/steps_seen_nsys.sql), else the ProfilerStep#N range's
-- (p_step), else the wrapper's (nsyscomm/ingest/kineto/profiler_steps.py). A projection only:
-- its rows keep call_rows' order.
SELECT CASE WHEN list_contains($saw, pid) THEN coalesce(step, p_step) ELSE coalesce(p_step, step) END AS step
FROM call_rows
