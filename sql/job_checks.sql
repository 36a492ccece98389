-- What the job's warnings count, in one scan of the calls: the largest group (for the bus-bandwidth
-- factors), calls matched across ranks by call order only (no nsyscomm or NCCL payload metadata),
-- calls of unknown message size.
-- Input: collectives.
SELECT coalesce(max(group_size), 1) AS max_group_size,
       count(*) FILTER (WHERE source NOT IN ('wrapper', 'nccl_payload', 'whatif_trace', 'nccl_inspector')) AS by_order,
       count(*) FILTER (WHERE bytes IS NULL AND op <> 'barrier') AS unsized
FROM collectives
