-- What the job's warnings count, in one scan of the calls: the largest group (for the bus-bandwidth
-- factors), calls matched across ranks by call order only (no nsyscomm or NCCL payload metadata,
-- and no sequence number from their source: sql/collectives.sql numbers those), calls of unknown
-- message size.
-- Input: collectives, calls (the sources' rows, their seq as the source gave it).
SELECT coalesce(max(group_size), 1) AS max_group_size,
       (SELECT count(*) FROM calls
        WHERE seq IS NULL AND source NOT IN ('wrapper', 'nccl_payload', 'whatif_trace', 'nccl_inspector')) AS by_order,
       count(*) FILTER (WHERE bytes IS NULL AND op <> 'barrier') AS unsized
FROM collectives
