-- The processes that saw step boundaries (sql/call_steps_nsys.sql): those with the wrapper's step
-- markers (call_step_marks), and those whose calls (call_rows: every call of the report, after
-- the capture window) the wrapper labelled past step 0. pids: their list.
SELECT coalesce(list(DISTINCT pid), []) AS pids
FROM (SELECT pid FROM call_step_marks UNION ALL SELECT pid FROM call_rows WHERE step > 0)
WHERE pid IS NOT NULL
