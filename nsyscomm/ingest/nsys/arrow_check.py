"""The edge of nsys's Arrow exports: each table's schema checked before its rows are
read, and its decompressed size bounded, so that nothing past nsyscomm.ingest.nsys.arrow sees a
timestamp as NaN or a string, a string table without its strings, or a small file that
decompresses to gigabytes (docs/limits.md)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from nsyscomm import settings
from nsyscomm.errors import InputError

if TYPE_CHECKING:  # imported when used: nsyscomm starts without pyarrow (discover imports this)
    import pyarrow as pa
    import pyarrow.parquet as pq

FIX = "export the report again with: nsys export --type arrow REPORT.nsys-rep"

# The columns the ingest reads, of the type nsys gives them (INTEGER or TEXT in its SQLite export,
# integers and strings or binary in its Arrow export): (integers, texts, required). Checked on each
# table's schema where it is read, so that nothing past here sees a timestamp as NaN or a string,
# or a string table without its strings.
_TIME = {"start", "end"}
_COLUMNS: dict[str, tuple[set[str], set[str], set[str]]] = {
    "StringIds": ({"id"}, {"value"}, {"id", "value"}),
    "NVTX_EVENTS": (
        _TIME | {"eventType", "rangeId", "category", "globalTid", "endGlobalTid", "textId", "domainId", "jsonTextId"},
        {"text", "jsonText"},
        {"start", "eventType"},
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        _TIME | {"deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName", "shortName"},
        set(),
        _TIME,
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (_TIME | {"eventClass", "globalTid", "correlationId", "nameId"}, set(), _TIME),
    "TARGET_INFO_SESSION_START_TIME": ({"utcEpochNs", "systemClockNs"}, {"utcTime", "localTime"}, set()),
    "PROCESSES": ({"globalPid", "pid"}, {"name"}, set()),
    "META_DATA_EXPORT": (set(), {"name"}, set()),
    "EXPORT_META_DATA": (set(), {"name"}, set()),
    "GPU_METRICS": ({"timestamp", "typeId", "metricId"}, set(), set()),
}
# Decompressed bytes of one table (Parquet, or IPC with compressed buffers): at most this many
# times the file's size, or MIN_DECOMPRESSED, whichever is more (docs/limits.md)
MAX_INFLATE = 50
MIN_DECOMPRESSED = 1 << 30


def _kind(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_integer(t) or pa.types.is_null(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "text"
    return str(t)


def check_schema(name: str, schema: pa.Schema, where: Path) -> None:
    """The table's columns the ingest reads of the type nsys writes, its required ones present;
    else InputError naming the file, the table, the column and the fix."""
    ints, texts, required = _COLUMNS.get(name, (set(), set(), set()))
    missing = sorted(required - set(schema.names))
    if missing:
        raise InputError(f"{where}: table {name} has no column {missing[0]!r}; {FIX}")
    for f in schema:
        want = "int" if f.name in ints else "text" if f.name in texts else None
        if want is not None and (got := _kind(f.type)) != want:
            what = "integers" if want == "int" else "strings"
            raise InputError(f"{where}: column {name}.{f.name} holds {got}, nsys writes {what} there; {FIX}")


def decompressed_limit(path: Path) -> int:
    """The most bytes one table of the file at path may decompress to."""
    # NSYSCOMM_ARROW_MAX_BYTES when set
    return settings.arrow_max_bytes() or max(MIN_DECOMPRESSED, MAX_INFLATE * path.stat().st_size)


def check_parquet(pf: pq.ParquetFile, path: Path) -> None:
    """The Parquet file's decompressed size, from its metadata, within decompressed_limit."""
    meta = pf.metadata  # sizes known before a byte is decompressed
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    limit = decompressed_limit(path)
    if size > limit:
        raise InputError(
            f"{path}: {meta.num_rows} rows decompress to {size} bytes, past {limit} "
            f"(NSYSCOMM_ARROW_MAX_BYTES); raise it for a real report this large, or {FIX}"
        )


def read_ipc(batches: Iterable[pa.RecordBatch], path: Path, name: str, schema: pa.Schema) -> pa.Table:
    """The stream's batches as one table, its decompressed size checked batch by batch against
    decompressed_limit (memory-mapped, uncompressed buffers cost nothing: they stay in the file)."""
    import pyarrow as pa

    limit, total, kept = decompressed_limit(path), 0, []
    for batch in batches:
        total += batch.nbytes
        if total > limit:
            raise InputError(
                f"{path}: table {name} decompresses past {limit} bytes (NSYSCOMM_ARROW_MAX_BYTES); "
                f"raise it for a real report this large, or {FIX}"
            )
        kept.append(batch)
    return pa.Table.from_batches(kept, schema=schema)
