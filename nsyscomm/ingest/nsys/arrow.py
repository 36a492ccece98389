"""nsys's Arrow exports, read without SQLite: the same tables, the same extract as a SQLite export.

Three layouts:

- ``nsys export --type arrow`` (nsys 2022.4 and later): one file holding one Arrow IPC *stream*
  per table, the streams written one after the other; each stream's schema names its table in
  its metadata (``table_name``). Checked on reports made here with nsys 2022.4.2.
- ``--type arrowdir`` (newer nsys): a folder of one Arrow IPC file per table, ``TABLE.arrow``.
- ``--type parquetdir`` (newer nsys): a folder of one Parquet file per table, ``TABLE.parquet``.
  These two are read from the documented layout (a file per table, named after it; IPC file or
  stream format alike); no nsys version that writes them was at hand to check against.

Every table becomes a view of a schema ``r`` of an in-memory DuckDB database over the Arrow
data (memory-mapped: a table nobody queries, such as the OS runtime calls, costs nothing), exactly
where the SQLite route attaches the report as ``r``; from there nsyscomm.ingest.nsys.reader and
nsyscomm.ingest.nsys.extract run unchanged, so both routes give the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nsyscomm.errors import InputError
from nsyscomm.ingest import paths
from nsyscomm.ingest.nsys import arrow_check

if TYPE_CHECKING:
    from nsyscomm.ingest.nsys.reader import Opened

# The tables the ingest reads (nsys.reader, nsys.extract, nccl_payload, gpu_metrics): those the
# temporary SQLite file of a report with NCCL payloads holds.
WANTED = (
    "StringIds",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "TARGET_INFO_SESSION_START_TIME",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "PROCESSES",
    "TARGET_INFO_GPU_METRICS",
    "GPU_METRICS",
    "NVTX_PAYLOAD_SCHEMAS",
    "NVTX_PAYLOAD_SCHEMA_ENTRIES",
)
# NCCL's extended NVTX payloads are decoded by nsyscomm.ingest.nsys.nccl_payload from a SQLite file
# (with Python's sqlite3: blobs DuckDB cannot read as text). An Arrow export holding them is
# written, its WANTED tables only, to a temporary SQLite file that takes the SQLite route.
_PAYLOAD_TABLES = ("NVTX_PAYLOAD_SCHEMAS", "NVTX_PAYLOAD_SCHEMA_ENTRIES")
_CONTINUATION = b"\xff\xff\xff\xff"
_COUNTED_TEXT = {"StringIds": ("value",), "NVTX_EVENTS": ("text", "jsonText")}  # extract._TEXT_COLUMNS
_DIR_SUFFIXES = (".arrow", ".parquet")


def is_export(path: Path) -> bool:
    """Whether path is an nsys Arrow export: a concatenated-streams file whose first schema names
    an nsys table, or a folder of per-table .arrow / .parquet files with StringIds among them."""
    path = Path(path)
    try:
        if path.is_dir():
            return any((path / f"StringIds{s}").is_file() for s in _DIR_SUFFIXES)
        with open(path, "rb") as f:
            head = f.read(8)
        if head[:4] != _CONTINUATION:
            return False
        return _first_table_name(path) is not None
    except OSError:
        return False


def _first_table_name(path: Path) -> str | None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    try:
        with paths.memory_map(path) as src:
            meta = ipc.open_stream(src).schema.metadata or {}
    except (pa.ArrowInvalid, OSError):
        return None
    name = meta.get(b"table_name")
    return name.decode() if name else None


def read_tables(path: Path, wanted: tuple[str, ...] | None = WANTED) -> tuple[dict, dict[str, set[str]]]:
    """(table -> Arrow table for the wanted ones (None: all), table -> column names for every table)."""
    path = Path(path)
    if path.is_dir():
        return _read_dir(path, wanted)
    return _read_streams(path, wanted)


def _read_streams(path: Path, wanted: tuple[str, ...] | None) -> tuple[dict, dict[str, set[str]]]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    out: dict = {}
    columns: dict[str, set[str]] = {}
    src = paths.memory_map(path)  # kept open by the tables' buffers, which point into it
    size = src.size()
    try:
        while src.tell() < size:
            reader = ipc.open_stream(src)
            name = (reader.schema.metadata or {}).get(b"table_name", b"").decode()
            if not name:
                raise InputError(
                    f"{path}: an Arrow stream at byte {src.tell()} names no nsys table; "
                    f"export the report again with: nsys export --type arrow REPORT.nsys-rep"
                )
            columns[name] = set(reader.schema.names)
            if wanted is None or name in wanted:
                arrow_check.check_schema(name, reader.schema, path)
                out[name] = arrow_check.read_ipc(reader, path, name, reader.schema)
            else:
                for _ in reader:  # skipped: memory-mapped, nothing is copied
                    pass
    except (pa.ArrowInvalid, OSError) as e:  # a truncated stream is an OSError (ArrowIOError)
        raise InputError(
            f"{path}: cannot read this Arrow export ({str(e).splitlines()[0]}); it may be "
            f"truncated: export the report again with: nsys export --type arrow REPORT.nsys-rep"
        ) from None
    return out, columns


def _read_dir(path: Path, wanted: tuple[str, ...] | None) -> tuple[dict, dict[str, set[str]]]:
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    out: dict = {}
    columns: dict[str, set[str]] = {}
    for f in sorted(path.iterdir()):
        if f.suffix not in _DIR_SUFFIXES or not f.is_file():
            continue
        name = f.stem
        try:
            if f.suffix == ".parquet":
                pf = pq.ParquetFile(paths.arrow_source(f))
                schema = pf.schema_arrow
                columns[name] = set(schema.names)
                if wanted is None or name in wanted:
                    arrow_check.check_schema(name, schema, f)
                    arrow_check.check_parquet(pf, f)
                    out[name] = pf.read()
                continue
            src = paths.memory_map(f)
            try:
                freader = ipc.open_file(src)
                columns[name] = set(freader.schema.names)
                if wanted is None or name in wanted:
                    arrow_check.check_schema(name, freader.schema, f)
                    out[name] = arrow_check.read_ipc(
                        (freader.get_batch(i) for i in range(freader.num_record_batches)), f, name, freader.schema
                    )
            except pa.ArrowInvalid:  # the stream format in a file of its own
                src.seek(0)
                reader = ipc.open_stream(src)
                columns[name] = set(reader.schema.names)
                if wanted is None or name in wanted:
                    arrow_check.check_schema(name, reader.schema, f)
                    out[name] = arrow_check.read_ipc(reader, f, name, reader.schema)
        except (pa.ArrowInvalid, OSError) as e:
            raise InputError(
                f"{f}: cannot read this table of an Arrow export ({str(e).splitlines()[0]}); "
                f"export the report again with nsys export"
            ) from None
    return out, columns


def open_export(path: Path, threads: int | None = None) -> Opened:
    """The export's tables in a new in-memory DuckDB database, as nsyscomm.ingest.nsys.reader.open_report
    makes them of a SQLite export (schema r, then the src_* tables): a reader.Opened."""
    from nsyscomm import duck
    from nsyscomm.ingest.nsys import reader as nsys_reader

    path = Path(path)
    arrow, tables = read_tables(path, wanted=None)
    if "StringIds" not in tables or not (
        {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "PROCESSES", "META_DATA_EXPORT", "EXPORT_META_DATA"}
        & tables.keys()
    ):
        raise InputError(
            f"{path}: Arrow data without nsys tables (StringIds, NVTX_EVENTS, CUPTI_*); "
            f"pass an nsys export made with: nsys export --type arrow REPORT.nsys-rep"
        )
    warnings: list[str] = []
    fixed = 0
    for name in list(arrow):
        arrow[name], bad = _as_in_sqlite(arrow[name], cast_numbers=False)
        # counted where the SQLite route counts them (the text it reads); elsewhere replaced silently
        fixed += sum(n for col, n in bad.items() if col in _COUNTED_TEXT.get(name, ()))
    if fixed:
        warnings.append(f"{path.name}: {fixed} string(s) were not valid UTF-8; read with the bad bytes replaced")
    con = duck.connect(threads=threads)
    try:
        con.execute("CREATE SCHEMA r")
        for name, table in arrow.items():  # names from the export: quoted, double quotes doubled
            q = name.replace('"', '""')
            con.register(f"arrow_{name}", table)
            con.execute(f'CREATE VIEW r."{q}" AS SELECT {_sqlite_columns(table.schema)} FROM "arrow_{q}"')
        nsys_reader._copy_tables(con, tables, warnings)
        nsys_reader._check(con, tables, warnings)
        return nsys_reader.Opened(con, tables, warnings)
    except BaseException:
        con.close()
        raise


def _sqlite_columns(schema) -> str:
    """The view's columns, typed as in SQLite, cast only when read: integers as BIGINT (unsigned
    64-bit values past 2^63 wrapped, as SQLite stores them), floats as DOUBLE."""
    import pyarrow as pa

    cols = []
    for f in schema:
        c = '"' + f.name.replace('"', '""') + '"'
        t = f.type
        if pa.types.is_uint64(t):
            cols.append(
                f"CASE WHEN {c} >= 9223372036854775808 THEN CAST({c}::HUGEINT - 18446744073709551616 "
                f"AS BIGINT) ELSE CAST({c} AS BIGINT) END AS {c}"
            )
        elif pa.types.is_integer(t) and t != pa.int64():
            cols.append(f"CAST({c} AS BIGINT) AS {c}")
        elif pa.types.is_floating(t) and t != pa.float64():
            cols.append(f"CAST({c} AS DOUBLE) AS {c}")
        else:
            cols.append(c)
    return ", ".join(cols) or "*"


def _as_in_sqlite(table, keep_binary: bool = False, cast_numbers: bool = True):
    """The table with the types its SQLite export has: nsys writes strings as Arrow binary and
    ids as unsigned integers, where SQLite holds TEXT and (signed 64-bit) INTEGER. Unsigned
    values are reinterpreted bit for bit, as SQLite stores them; text that is not UTF-8 gets its
    bad bytes replaced, as nsys.extract does for SQLite exports (keep_binary: left binary, as a
    blob: NCCL's payloads in binaryData). cast_numbers=False: numbers left as they are (the
    DuckDB view casts them when read, _sqlite_columns). Returns (table, {column: strings fixed})."""
    import pyarrow as pa

    fixed: dict[str, int] = {}
    fields, cols = [], []
    for f, col in zip(table.schema, table.columns):
        t = f.type
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            try:
                col = col.cast(pa.large_string())
            except pa.ArrowInvalid:  # not UTF-8: decoded value by value
                if keep_binary:
                    fields.append(f)
                    cols.append(col)
                    continue
                values = []
                for v in col.to_pylist():
                    if v is not None:
                        text = v.decode("utf-8", "replace")
                        fixed[f.name] = fixed.get(f.name, 0) + ("\ufffd" in text)
                        v = text
                    values.append(v)
                col = pa.chunked_array([pa.array(values, pa.large_string())])
            t = pa.large_string()
        elif not cast_numbers:
            pass
        elif pa.types.is_unsigned_integer(t) or (pa.types.is_integer(t) and t.bit_width < 64):
            col = col.cast(pa.int64(), safe=False)
            t = pa.int64()
        elif pa.types.is_float32(t):
            col = col.cast(pa.float64())
            t = pa.float64()
        fields.append(pa.field(f.name, t))
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields)), fixed


def _has_payloads(path: Path) -> bool:
    """Whether nccl_payload will read NCCL's own NVTX ranges (names nccl..., not PyTorch's
    nccl:...), the condition of nccl_payload.apply, on the NVTX text or its registered strings."""
    import pyarrow.compute as pc

    arrow, _ = read_tables(path, wanted=("NVTX_EVENTS", "StringIds"))
    nv = arrow.get("NVTX_EVENTS")
    if nv is None or not nv.num_rows:
        return False

    def ncclish(values) -> bool:
        return bool(pc.any(pc.and_(pc.starts_with(values, "nccl"), pc.invert(pc.starts_with(values, "nccl:")))).as_py())

    if "text" in nv.column_names and ncclish(nv["text"]):
        return True
    strings = arrow.get("StringIds")
    if strings is None or "textId" not in nv.column_names:
        return False
    used = pc.is_in(
        strings["id"].cast("int64"), value_set=pc.unique(nv["textId"].cast("int64", safe=False)).drop_null()
    )
    return ncclish(strings.filter(used)["value"])


def to_sqlite(path: Path, dst: Path, wanted: tuple[str, ...] = WANTED) -> Path:
    """The export's wanted tables as a SQLite file at dst, typed as nsys's SQLite export types them."""
    import sqlite3

    arrow, _ = read_tables(path, wanted)
    con = sqlite3.connect(dst)
    try:
        for name, table in arrow.items():  # names from the caller's fixed list
            table, _ = _as_in_sqlite(table, keep_binary=True)
            # column names come from the export: quoted, double quotes doubled
            decl = ", ".join(
                '"'
                + f.name.replace('"', '""')
                + '" '
                + (
                    "TEXT"
                    if str(f.type) in ("large_string", "binary")
                    else "REAL"
                    if str(f.type) == "double"
                    else "INTEGER"
                )
                for f in table.schema
            )
            con.execute(f'CREATE TABLE "{name}" ({decl})')  # name: from the caller's fixed list
            # bytes that are not UTF-8 stored as TEXT, as nsys stores them (a bare bytes value is a BLOB)
            marks = ", ".join("CAST(? AS TEXT)" if str(f.type) == "binary" else "?" for f in table.schema)
            con.executemany(
                f'INSERT INTO "{name}" VALUES ({marks})',
                zip(*(c.to_pylist() for c in table.columns)) if table.num_columns else [],
            )
        con.commit()
    finally:
        con.close()
    return dst


def exports_in(folder: Path) -> list[Path]:
    """The Arrow exports below folder: concatenated-streams files (*.arrow) and per-table folders."""
    found = []
    for p in sorted(folder.rglob("*")):
        if p.is_dir() and is_export(p):
            found.append(p)
        elif p.is_file() and p.suffix == ".arrow" and p.parent not in found and is_export(p):
            found.append(p)
    return found
