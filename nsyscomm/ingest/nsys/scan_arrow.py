"""What the C scan (nsyscomm/ingest/nsys/_sqlite_scan.c) is given, and its output handed to DuckDB
as Arrow, without a copy: the statements it runs (its row functions called inside SQLite's loop)
and the registered names it looks for; its (values, validity) buffers become Arrow arrays
(from_buffers: pa.array() and pa.table() would import pandas while the report is read), its NVTX
output the table src_ranges_all."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from nsyscomm.ingest import limits

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


def registered_names(lite: sqlite3.Connection, patterns: tuple[str, ...]) -> list[tuple[int, str]] | None:
    """The registered strings whose names can matter (StringIds' values with a prefix of
    patterns, reader._RANGE_PATTERNS, cut as limits.cut_sql cuts them) in id order, read through
    SQLite: what reader._scan's DuckDB statement gives, in about half its wall time (DuckDB's scanner converts every
    string of the table into its own). None wherever DuckDB might read the table otherwise: other
    declared types, a value that is not text or not UTF-8, a name that matters holding a NUL;
    that statement answers then, errors included."""
    types = {r[1]: (r[2].upper(), r[5]) for r in lite.execute("SELECT * FROM pragma_table_info('StringIds')")}
    if types.get("id") != ("INTEGER", 1) or types.get("value", ("",))[0] != "TEXT":
        return None  # id not the rowid (unique, an integer), or value not declared text
    try:
        rows = lite.execute("SELECT id, value FROM StringIds ORDER BY id").fetchall()
    except sqlite3.Error:  # text that is not UTF-8, among others
        return None
    prefixes = tuple(p.rstrip("%") for p in patterns)
    names = []
    for i, v in rows:
        if type(v) is not str:
            return None
        if v.startswith(prefixes):
            if "\0" in v:  # nsys's own NULs are in the environment's strings, never in these
                return None
            names.append((i, limits.cut_name(v)))
    return names


def column_or_null(cols: set[str], name: str) -> str:
    return f'"{name}"' if name in cols else "NULL"


def rows_sql(table: str, function: str, values: str) -> str:
    """The statement _sqlite_scan runs over each chunk of a table's rowids: its row function
    (ROW_FUNCTION there) called with each row's values inside SQLite's own loop, false for every
    row, so that the statement returns a single count of 0."""
    return f"SELECT count(*) FROM {table} WHERE rowid BETWEEN ? AND ? AND {function}({values})"


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
