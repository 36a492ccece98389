-- Communication per communicator, for the parallelism dimensions (nsyscomm.analyses.dimensions):
-- its size and ranks, its calls' time (comm), the part of it spent waiting for the last rank
-- (wait: a call's duration minus its logical collective's fastest duration), and its exposed
-- time (a GPU call's duration minus the compute-kernel busy time on its device while it ran,
-- summed per call: concurrent calls on several streams count each), the wrapper's description
-- of the group (torch's group_desc: DeviceMesh's "mesh_<dim>"), and whether it carried
-- point-to-point calls. comm and wait are, on each rank, the time at least one of its calls on
-- the communicator was in flight (waiting), calls in flight together counted once as in
-- sql/ranks.sql, summed over its ranks: never more than their elapsed time. Calls that set up
-- their communicator or never completed are left out. The rows (sql/dimensions_spans.sql) come
-- as `spans`, each with its part of its rank's unions on its communicator
-- (nsyscomm/analyses/spans.py). Inputs: spans, collectives, group_descs.
WITH
-- the ranks seen in each group, in numeric order (ranks 0, 4, 8, 12: a stride the pattern reads)
members AS (SELECT DISTINCT "group", rank FROM collectives WHERE "group" IS NOT NULL AND rank IS NOT NULL)
SELECT "group",
       max(group_size)                                          AS group_size,
       (SELECT string_agg(m.rank::VARCHAR, ',' ORDER BY m.rank) FROM members m
        WHERE m."group" = spans."group")                        AS ranks_seen,
       any_value(group_ranks)                                   AS group_ranks,
       bool_or(op IN ('send', 'recv'))                          AS p2p,
       count(*) FILTER (WHERE op NOT IN ('send', 'recv'))       AS collectives,
       sum(comm_ns) / 1e6                                       AS comm_ms,
       sum(wait_ns) / 1e6                                       AS wait_ms,
       sum(exposed_ns) / 1e6                                    AS exposed_ms,
       (SELECT min("desc") FROM group_descs d WHERE d."group" = spans."group") AS "desc"
FROM spans GROUP BY "group" ORDER BY comm_ms DESC, "group"
