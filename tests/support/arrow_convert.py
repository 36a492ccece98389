"""Test helper: an nsys SQLite export rewritten in the layouts of nsys's Arrow exports.

Every table, every row, in SQLite's order, typed as nsys's own Arrow export types the tables it
shares with a SQLite export (checked on nsys 2022.4.2's: ids and times as integers, strings as
binary); a column's type from its declared SQLite type (INTEGER -> int64, REAL -> float64, the
rest -> binary). Layouts: "arrow" (one IPC stream per table, concatenated, the table named in the
schema metadata: what nsys 2022.4 writes), "arrowdir" (TABLE.arrow, IPC file format, one per
table) and "parquetdir" (TABLE.parquet).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from nsyscomm.ingest.nsys.reader import read_only_uri


def _tables(src: Path):
    con = sqlite3.connect(read_only_uri(src), uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        for name in names:
            con.text_factory = str
            info = con.execute("SELECT name, type FROM pragma_table_info(?)", (name,)).fetchall()
            con.text_factory = bytes  # the values: text as nsys's Arrow export has it, binary
            rows = con.execute(f'SELECT * FROM "{name}" ORDER BY rowid').fetchall()
            fields, cols = [], []
            for i, (col, decl) in enumerate(info):
                decl = (decl or "").upper()
                typ = (
                    pa.int64()
                    if "INT" in decl
                    else pa.float64()
                    if decl in ("REAL", "DOUBLE", "FLOAT")
                    else pa.binary()
                )
                values = [r[i] for r in rows]
                if typ == pa.binary():
                    values = [v if v is None or isinstance(v, bytes) else str(v).encode() for v in values]
                fields.append(pa.field(col, typ))
                cols.append(pa.array(values, typ))
            schema = pa.schema(fields, metadata={"table_name": name})
            yield name, pa.Table.from_arrays(cols, schema=schema)
    finally:
        con.close()


def convert(src: Path, dst: Path, layout: str = "arrow") -> Path:
    """Write the SQLite export src as an Arrow export at dst (a file for "arrow", else a folder)."""
    if layout == "arrow":
        with open(dst, "wb") as f:
            for _, t in _tables(src):
                with ipc.new_stream(f, t.schema) as w:
                    w.write_table(t)
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    for name, t in _tables(src):
        if layout == "arrowdir":
            with ipc.new_file(str(dst / f"{name}.arrow"), t.schema) as w:
                w.write_table(t)
        elif layout == "parquetdir":
            pq.write_table(t, dst / f"{name}.parquet")
        else:
            raise ValueError(layout)
    return dst
