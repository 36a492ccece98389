-- What the job's warnings count, in one scan of the collectives: the largest group (for the
-- bus-bandwidth factors) and the calls of unknown message size. (The calls matched across ranks by
-- call order only are counted as the sources' calls are read: nsyscomm/combine/job.py.)
-- Input: collectives.
SELECT coalesce(max(group_size), 1) AS max_group_size,
       count(*) FILTER (WHERE bytes IS NULL AND op <> 'barrier') AS unsized
FROM collectives
