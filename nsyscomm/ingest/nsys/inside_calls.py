"""What else a call of an nsys report did inside its host range, besides its NCCL kernels:
NCCL's communicator initialization (init_ns, sql/nccl_init_nsys.sql) and, for a call that ran
no NCCL kernel, its device copies as its device time (sql/copies_nsys.sql; docs/architecture.md,
"Facts about NCCL")."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm import duck
from nsyscomm.ingest.nsys.nccl_api import INIT_APIS

_EDGES = ("pid", "tid", "cpu_start", "cpu_end")
# what sql/copies_nsys.sql reads (a damaged or foreign table without them: no copies, no failure)
_COPY_COLUMNS = {"start", "end", "streamId", "deviceId", "correlationId", "globalPid"}
_LAUNCH_COLUMNS = {"start", "globalTid", "correlationId"}


def apply(
    con: duckdb.DuckDBPyConnection, tables: dict, calls: pa.Table, warnings: list[str], report: str
) -> tuple[pa.Table, int]:
    """calls with init_ns filled, and gpu_start/gpu_end/stream/device from their copies where
    they ran no kernel; and how many calls took their device time from copies. Needs the
    connection of nsyscomm.ingest.nsys.extract (src_ranges, the report attached as r)."""
    if not calls.num_rows or not set(_EDGES) <= set(calls.column_names):
        return calls, 0
    names = list(INIT_APIS)
    row = con.execute("SELECT count(*) FROM src_ranges WHERE list_contains($n, name)", {"n": names}).fetchone()
    has_init = bool(row and row[0])
    no_kernel = pc.is_null(calls["gpu_start"]) if "gpu_start" in calls.column_names else None
    copies = (
        no_kernel is not None
        and pc.any(no_kernel).as_py()
        and _COPY_COLUMNS <= set(tables.get("CUPTI_ACTIVITY_KIND_MEMCPY", ()))
        and _LAUNCH_COLUMNS <= set(tables.get("CUPTI_ACTIVITY_KIND_RUNTIME", ()))
    )
    if not has_init and not copies:
        return calls, 0
    edges = pa.table({"idx": pa.array(np.arange(calls.num_rows, dtype=np.int64))} | {c: calls[c] for c in _EDGES})
    copied = 0
    try:
        if has_init:
            con.register("call_edges", edges)
            got = con.execute(duck.sql("nccl_init_nsys"), {"names": names}).fetchnumpy()
            init = np.zeros(calls.num_rows, np.int64)
            init[got["idx"]] = got["init_ns"]
            mask = np.zeros(calls.num_rows, bool)
            mask[got["idx"]] = True
            calls = _set(calls, "init_ns", pa.array(init, pa.int64(), mask=~mask))
            con.unregister("call_edges")
        if copies:
            con.register("call_edges", edges.filter(no_kernel))
            try:
                got = con.execute(duck.sql("copies_nsys"), {"names": names}).fetchnumpy()
            except duckdb.Error as e:  # a damaged copy table: the calls keep their host time
                if isinstance(e, duckdb.OutOfMemoryException) or duck.interrupted(e):
                    raise
                warnings.append(f"{report}: device copies not read ({str(e).strip().splitlines()[0][:200]})")
                got = {"idx": []}
            con.unregister("call_edges")
            copied = len(got["idx"])
            if copied:
                calls = _fill(calls, got)
    finally:
        try:
            con.unregister("call_edges")
        except duckdb.Error:
            pass
    return calls, copied


def _set(calls: pa.Table, name: str, values: pa.Array) -> pa.Table:
    i = calls.schema.get_field_index(name)
    if i < 0:
        return calls.append_column(name, values)
    return calls.set_column(i, name, values.cast(calls.schema.field(i).type))


def _fill(calls: pa.Table, got: dict) -> pa.Table:
    """The copies' span as the call's device time: gpu_start, gpu_end, stream, device."""
    for col, typ in (
        ("gpu_start", pa.int64()),
        ("gpu_end", pa.int64()),
        ("stream", pa.int64()),
        ("device", pa.int32()),
    ):
        vals = calls[col].to_pylist() if col in calls.column_names else [None] * calls.num_rows
        for i, v in zip(got["idx"], got[col]):
            vals[int(i)] = int(v)
        calls = _set(calls, col, pa.array(vals, typ))
    return calls
