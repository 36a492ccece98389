"""NVTX extended payloads as nsys exports them, decoded by entry name.

The layouts a program registered are in ``NVTX_PAYLOAD_SCHEMAS`` / ``NVTX_PAYLOAD_SCHEMA_ENTRIES``,
the values in ``NVTX_EVENTS.binaryData`` (``nsys export --include-blobs=true``: a BLOB, or TEXT
holding hex or base64) or ``jsonText`` (``--include-json=true``). Entries are picked by *name*
into the fields the caller names, with the offsets and types the report registered, so nothing
depends on schema ids. Nothing here knows NCCL: nsyscomm.ingest.nsys.nccl_api names its entries and
nsyscomm.ingest.nsys.nccl_payload reads its ranges.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

SCHEMA_BASE = 1 << 24

# NVTX payload entry types (nvToolsExtPayload.h) -> struct format
_ENTRY_FORMATS = {
    1: "b",
    2: "B",
    3: "h",
    4: "H",
    5: "i",
    6: "I",
    7: "q",
    8: "Q",
    9: "q",
    10: "Q",
    11: "b",
    12: "B",
    13: "h",
    14: "H",
    15: "i",
    16: "I",
    17: "q",
    18: "Q",
    19: "f",
    20: "d",
    22: "Q",
    23: "Q",
}

_NATURAL = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8, "f": 4, "d": 8}


@dataclass
class Schema:
    schema_id: int
    size: int | None
    entries: list[tuple[str, int, int]] = field(default_factory=list)  # (field, type, offset)


def load_schemas(
    rows_schemas: Iterable[tuple[int, int | None]],
    rows_entries: Iterable[tuple[int, int, int | None, str | None, int | None]],
    fields: dict[str, str],
) -> dict[int, Schema]:
    """NVTX_PAYLOAD_SCHEMAS rows (schemaId, payloadSize) and NVTX_PAYLOAD_SCHEMA_ENTRIES rows
    (schemaId, idx, type, name, offset) -> schemaId -> Schema (duplicates, one per process, collapse),
    keeping the entries whose name (lowercase) ``fields`` maps to a field.
    A missing offset is computed with natural alignment, as NVTX does."""
    sizes = {int(s): (None if z is None else int(z)) for s, z in rows_schemas}
    by_id: dict[int, dict[int, tuple]] = {}
    for sid, idx, typ, name, off in rows_entries:
        by_id.setdefault(int(sid), {})[int(idx)] = (name, None if typ is None else int(typ), off)
    out = {}
    for sid, ents in by_id.items():
        sch = Schema(sid, sizes.get(sid))
        pos = 0
        for idx in sorted(ents):
            name, typ, off = ents[idx]
            fmt = entry_format(typ)
            width = _NATURAL.get(fmt, 8)
            if off is None:
                off = (pos + width - 1) // width * width
            off = int(off)
            pos = off + width
            f = fields.get((name or "").strip().lower())
            if f:
                sch.entries.append((f, typ, off))
        if sch.size is None:
            sch.size = pos
        out[sid] = sch
    return out


def entry_format(typ: int | None) -> str:
    if typ is None:
        return "Q"
    if typ >= SCHEMA_BASE:  # a registered schema used as a type: an enum (NCCL's ncclRedOp_t), 4 bytes
        return "i"
    return _ENTRY_FORMATS.get(typ, "Q")


def blob_bytes(value: object) -> bytes | None:
    """binaryData as exported: BLOB bytes, or TEXT holding hex (optionally 0x-prefixed) or base64."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    s = str(value).strip()
    if not s:
        return None
    h = s[2:] if s.lower().startswith("0x") else s
    h = re.sub(r"[\s:-]", "", h)
    if len(h) % 2 == 0 and re.fullmatch(r"[0-9a-fA-F]+", h):
        return bytes.fromhex(h)
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return s.encode("latin-1", "replace")


def decode_binary(value: object, schemas: dict[int, Schema], schema_id: int | None = None) -> dict:
    """Decode one payload. ``schema_id`` picks the layout when known; otherwise a 16-byte
    nvtxPayloadData_t-like header {u64 schemaId, u64 size} naming a known schema is honoured,
    else the schema whose static size equals the blob's length (ambiguity -> {})."""
    data = blob_bytes(value)
    if not data:
        return {}
    sch = None
    if len(data) >= 16:
        sid, size = struct.unpack_from("<QQ", data, 0)
        if sid in schemas and size == len(data) - 16:
            sch, data = schemas[sid], data[16:]
    if sch is None and schema_id is not None:
        sch = schemas.get(schema_id)
    if sch is None:
        fits = [s for s in schemas.values() if s.size == len(data)]
        if len({tuple(s.entries) for s in fits}) == 1:
            sch = fits[0]
    if sch is None:
        return {}
    out = {}
    for f, typ, off in sch.entries:
        fmt = entry_format(typ)
        if off + _NATURAL[fmt] <= len(data):
            out[f] = struct.unpack_from("<" + fmt, data, off)[0]
    return out


def decode_json(text: object, fields: dict[str, str], value: Callable[[str, Any], Any] | None = None) -> dict:
    """jsonText -> fields: the first JSON object (at any depth) whose keys are entry names ``fields``
    maps (lowercase), each value passed through ``value(field, v)`` when given."""
    if not text:
        return {}
    try:
        obj = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    stack = [obj]
    while stack:
        o = stack.pop(0)
        if isinstance(o, dict):
            hits = {
                fields[k.strip().lower()]: v for k, v in o.items() if isinstance(k, str) and k.strip().lower() in fields
            }
            if hits:
                return {k: value(k, v) if value else v for k, v in hits.items()}
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return {}
