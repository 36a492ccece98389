"""The normalized ``collectives`` table: the only contract between ingest and analysis.

One row per collective call on one rank. Every source (nsys SQLite, Kineto JSON, ...)
produces exactly these columns, in this order; every analysis in sql/ reads only them.
"""

from __future__ import annotations

COLLECTIVES = (
    ("report", "VARCHAR"),  # file name of the report the row came from
    ("rank", "INTEGER"),  # wrapper marker > NCCL payload > process order
    ("local_rank", "INTEGER"),
    ("host", "VARCHAR"),
    ("pid", "BIGINT"),
    ("tid", "BIGINT"),
    ("op", "VARCHAR"),  # canonical family, see nsyscomm.busbw.OPS
    ("api", "VARCHAR"),  # the exact call made
    ("bytes", "BIGINT"),  # nccl-tests message size S
    ("dtype", "VARCHAR"),
    ("numel", "BIGINT"),
    ("group", "VARCHAR"),
    ("group_size", "INTEGER"),
    ("group_ranks", "VARCHAR"),
    ("seq", "BIGINT"),
    ("caller", "VARCHAR"),
    ("step", "BIGINT"),
    ("cpu_start", "BIGINT"),
    ("cpu_end", "BIGINT"),
    ("gpu_start", "BIGINT"),
    ("gpu_end", "BIGINT"),
    ("stream", "BIGINT"),
    ("device", "INTEGER"),
    # the execution span every analysis times a call by (docs/architecture.md, "Timing model"):
    # a source gives it where it knows when the work ran (an asynchronous call's completion on
    # the backend's thread); else the kernels' span, else the host range
    ("exec_start", "BIGINT"),
    ("exec_end", "BIGINT"),
    ("duration_ns", "BIGINT"),  # exec_end - exec_start
    # the time from the call's enqueue (cpu_start) until its queue let it run: the part it waited
    # behind the calls issued before it on the same queue (a gloo process group's worker threads,
    # an NCCL stream; docs/architecture.md, "Timing model"), never part of duration_ns
    ("queued_ns", "BIGINT"),
    ("source", "VARCHAR"),  # wrapper | nccl_payload | torch_range | kernel_name
    # extras beyond the first list (docs/architecture.md, "The collectives table": extra columns are fine)
    ("kernel", "VARCHAR"),  # NCCL kernel short name, first one when several
    ("algo", "VARCHAR"),  # NCCL algorithm parsed from the kernel name (RING, TREE, ...)
    ("proto", "VARCHAR"),  # NCCL protocol (LL, LL128, SIMPLE)
    ("kernels", "INTEGER"),  # number of NCCL kernels matched to the call
    ("kernel_ns", "BIGINT"),  # sum of the matched kernels' durations
    ("peer", "INTEGER"),  # point-to-point: the other side's global rank
    ("pair", "VARCHAR"),  # point-to-point: 'a-b', the two ranks (a < b)
    ("logical_id", "BIGINT"),  # one logical collective: same (group, pair, op, seq) on its ranks
    ("busy_at_start", "BIGINT"),  # compute busy time on the call's GPU before gpu_start (nsyscomm.ingest.busy)
    ("busy_at_end", "BIGINT"),  # ... and before gpu_end: their difference is compute under the call
    ("init_ns", "BIGINT"),  # NCCL's communicator initialization inside the call (its init NVTX ranges)
    ("setup", "BOOLEAN"),  # the call set up its communicator: left out of the statistics (sql/setup_calls.sql)
    # the caller's wait for an asynchronous call (Work.wait, wait_tensor: the nsyscomm.wait range
    # of nvtx_format.py), NULL where it made none that nsyscomm saw
    ("wait_start", "BIGINT"),
    ("wait_end", "BIGINT"),
    # false for a call that never completed (a hang, a killed job): no end seen, a Flight Recorder
    # entry not completed, or a flight record of nsyscomm run's left unfinished. Such a call has no
    # latency: the statistics leave it to the hang diagnosis. A source may give it (NULL: completed
    # where an end was seen)
    ("completed", "BOOLEAN"),
    # the step at which the call's rank joined under torch.distributed.algorithms.Join, for a call
    # it made after (Join's shadow collectives, matching the ranks still training); else NULL
    ("joined", "BIGINT"),
)

COLUMN_NAMES = tuple(name for name, _ in COLLECTIVES)


def arrow_types() -> dict:
    """Column -> the Arrow type of its SQL type (the sources' calls are Arrow tables)."""
    import pyarrow as pa

    by_sql = {"VARCHAR": pa.large_string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_()}
    return {name: by_sql[t] for name, t in COLLECTIVES}


def create_sql(table: str = "collectives") -> str:
    cols = ",\n    ".join(f'"{n}" {t}' for n, t in COLLECTIVES)
    return f"CREATE TABLE {table} (\n    {cols}\n)"
