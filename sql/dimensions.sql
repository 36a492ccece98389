-- Communication per communicator, for the parallelism dimensions (nsyscomm.analyses.dimensions):
-- its size and ranks, its calls' time (comm), the part of it spent waiting for the last rank
-- (wait: a call's duration minus its logical collective's fastest duration), and its exposed
-- time (a GPU call's duration minus the compute-kernel busy time on its device while it ran,
-- summed per call: concurrent calls on several streams count each), the wrapper's description
-- of the group (torch's group_desc: DeviceMesh's "mesh_<dim>"), and whether it carried
-- point-to-point calls. comm and wait are, on each rank, the time at least one of its calls on
-- the communicator was in flight (waiting), calls in flight together counted once as in
-- sql/ranks.sql, summed over its ranks: never more than their elapsed time. Calls that set up
-- their communicator or never completed are left out. Inputs: collectives, logical_collectives,
-- group_descs.
WITH calls AS (
    SELECT c."group", c.rank, c.op, c.exec_start AS s, c.exec_end AS e,
           c.exec_start + greatest(0, c.duration_ns - l.latency_ns) AS we,
           CASE WHEN c.gpu_start IS NOT NULL
                THEN c.duration_ns - coalesce(c.busy_at_end - c.busy_at_start, 0) END AS exposed_ns,
           c.group_size, c.group_ranks
    FROM collectives c JOIN logical_collectives l USING (logical_id)
    WHERE c."group" IS NOT NULL AND NOT c.setup AND c.completed AND c.exec_start IS NOT NULL
),
-- each span's part not covered by the spans of the same rank and communicator that began before it
-- (one sort for both: a union's length does not depend on the order of spans that start together)
parts AS (
    SELECT *,
           greatest(0, e - greatest(s, coalesce(max(e) OVER w, s)))    AS comm_ns,
           greatest(0, we - greatest(s, coalesce(max(we) OVER w, s)))  AS wait_ns
    FROM calls
    WINDOW w AS (PARTITION BY "group", rank ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- the ranks seen in each group, in numeric order (ranks 0, 4, 8, 12: a stride the pattern reads)
members AS (SELECT DISTINCT "group", rank FROM collectives WHERE "group" IS NOT NULL AND rank IS NOT NULL)
SELECT "group",
       max(group_size)                                          AS group_size,
       (SELECT string_agg(m.rank::VARCHAR, ',' ORDER BY m.rank) FROM members m
        WHERE m."group" = parts."group")                        AS ranks_seen,
       any_value(group_ranks)                                   AS group_ranks,
       bool_or(op IN ('send', 'recv'))                          AS p2p,
       count(*) FILTER (WHERE op NOT IN ('send', 'recv'))       AS collectives,
       sum(comm_ns) / 1e6                                       AS comm_ms,
       sum(wait_ns) / 1e6                                       AS wait_ms,
       sum(exposed_ns) / 1e6                                    AS exposed_ms,
       (SELECT min("desc") FROM group_descs d WHERE d."group" = parts."group") AS "desc"
FROM parts GROUP BY "group" ORDER BY comm_ms DESC, "group"
