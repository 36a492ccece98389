"""The C scan's output (nsyscomm/ingest/nsys/_sqlite_scan.c) handed to DuckDB as Arrow, without a copy:
its (values, validity) buffers become Arrow arrays (from_buffers: pa.array() and pa.table() would
import pandas while the report is read), its NVTX output the table src_ranges_all."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    import pyarrow as pa

# The wrapper messages' fields (nsyscomm/nvtx_format.py) as columns msg_<field> of src_ranges,
# and parsed: whether the C scan split the message (split_message in _sqlite_scan.c, for the
# layout the wrapper writes; the name is NULL then). Where it did not, the fields are NULL and
# sql/calls_nsys.sql splits the name. The split costs far less CPU in C, inside the scan's
# threads, than in SQL.
MESSAGE_FIELDS = {
    "op": "VARCHAR",
    "api": "VARCHAR",
    "bytes": "BIGINT",
    "dtype": "VARCHAR",
    "numel": "BIGINT",
    "pg": "VARCHAR",
    "gsize": "BIGINT",
    "granks": "VARCHAR",
    "seq": "BIGINT",
    "step": "BIGINT",
    "peer": "BIGINT",
    "caller": "VARCHAR",
}


def sqlite_scan_module() -> ModuleType | None:
    """nsyscomm.ingest.nsys._sqlite_scan, or None where it was not built (no C compiler or SQLite headers)."""
    try:
        from nsyscomm.ingest.nsys import _sqlite_scan  # type: ignore[attr-defined]  # (a C extension: no stub)
    except ImportError:
        return None
    return _sqlite_scan


def arrow_table(out: dict, names: list[str]) -> pa.Table:
    """Columns of _sqlite_scan's (values, valid) buffers as an Arrow table, without a copy
    (from_buffers: pa.array() and pa.table() would import pandas)."""
    import pyarrow as pa

    cols = []
    for n in names:
        values, valid = out[n]
        rows, bitmap, nulls = validity(valid)
        cols.append(pa.Array.from_buffers(pa.int64(), rows, [bitmap, pa.py_buffer(values)], null_count=nulls))
    return pa.Table.from_arrays(cols, names=names)


def validity(valid: bytearray) -> tuple:
    """(rows, Arrow validity bitmap or None, NULL count) of _sqlite_scan's one-byte-a-row flags."""
    import numpy as np
    import pyarrow as pa

    ok = np.frombuffer(valid, np.uint8).astype(bool)
    nulls = len(ok) - int(ok.sum())
    return len(ok), pa.py_buffer(np.packbits(ok, bitorder="little")) if nulls else None, nulls


def ranges_table(nvtx: dict) -> pa.Table:
    """src_ranges_all from _sqlite_scan's NVTX output: rid (the range's number), start, end,
    globalTid, name (NULL for a message the scan split), parsed and the messages' fields
    (MESSAGE_FIELDS). Strings as Arrow large_string: DuckDB reads it as VARCHAR, whatever the
    strings' total size."""
    import numpy as np
    import pyarrow as pa

    ranges = arrow_table(nvtx, ["start", "end", "globalTid"])
    n = len(ranges)
    parsed = np.frombuffer(nvtx["parsed"][0], np.int64).astype(bool)
    cols = {
        "rid": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(n, dtype=np.int64))]),
        **{c: ranges[c] for c in ranges.column_names},
        "name": strings(*nvtx["name"]),
        "parsed": pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(parsed, bitorder="little"))]),
    }
    for f, typ in MESSAGE_FIELDS.items():
        cols[f"msg_{f}"] = arrow_table(nvtx, [f]).column(0) if typ == "BIGINT" else strings(*nvtx[f])
    return pa.Table.from_arrays(list(cols.values()), names=list(cols))


def strings(offsets: bytearray, data: bytearray, valid: bytearray) -> pa.Array:
    """A string column of _sqlite_scan's (offsets, data, valid) buffers as Arrow, without a copy."""
    import pyarrow as pa

    rows, bitmap, nulls = validity(valid)
    return pa.Array.from_buffers(
        pa.large_string(), rows, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )
