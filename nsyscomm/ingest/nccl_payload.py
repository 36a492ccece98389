"""NCCL's own NVTX ranges (domain "NCCL", NCCL >= 2.19) and their extended payloads.

NCCL wraps each API call in an NVTX push/pop range named after it (``ncclAllReduce``,
``ncclSend``, ``ncclGroupEnd``, ``ncclCommInitRank``...) carrying a binary payload whose layout
is registered as a payload schema; nsys exports the layouts in ``NVTX_PAYLOAD_SCHEMAS`` /
``NVTX_PAYLOAD_SCHEMA_ENTRIES`` and the values in ``NVTX_EVENTS.binaryData`` (with
``nsys export --include-blobs=true``) or ``jsonText`` (with ``--include-json=true``).

Decoding is by entry *name* ("NCCL communicator ID", "Message size [bytes]", "Reduction operation",
"Root", "Peer rank", "No. of ranks", "Rank", "CUDA device") with the offsets and types the
report itself registered, and the operation comes from the range's name, so it does not
depend on the schema ids, which shift between NCCL releases (the reduction-op enum's schema
id is (1<<24)+11 in 2.19, +14 later, +16 in 2.27, +24 in 2.28+). Any entry whose type is a
schema id (>= 1<<24) is read as a 4-byte enum (``ncclRedOp_t``).

Group semantics: every ncclSend/ncclRecv/collective between ncclGroupStart and the matching
(outermost) ncclGroupEnd on a thread is one *unit*, whose kernels are those launched inside
that ncclGroupEnd. An ungrouped call is a unit by itself (its kernels are launched inside it).

Bytes are converted to nccl-tests S: AllGather's payload is the per-rank send size
(S = n x that), ReduceScatter's the per-rank receive size (S = n x that), the rest as is;
a group of sends/receives to every peer is an all_to_all with S = the bytes one rank sends.

Hook into ``nsyscomm.ingest.nsys.extract.extract`` (while its DuckDB connection is open, after ``calls`` and
``markers`` are built)::

    calls, markers = nccl_payload.apply(con, tables, calls, markers, warnings, report, path)
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from dataclasses import dataclass, field

import pandas as pd

from nsyscomm import duck

SCHEMA_BASE = 1 << 24
# stable since 2.19 (docs/architecture.md, "Facts about NCCL"); used only when a range's name is not an NCCL API name
SCHEMA_OPS = {4: "AllGather", 5: "AllReduce", 6: "Broadcast", 7: "ReduceScatter", 8: "Reduce", 9: "Send", 10: "Recv"}
SCHEMA_OPS_228 = {16: "AlltoAll", 17: "Gather", 18: "Scatter"}

# NCCL API (range name without "nccl") -> canonical op
API_OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Bcast": "broadcast",
    "Reduce": "reduce",
    "Send": "send",
    "Recv": "recv",
    "AlltoAll": "all_to_all",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}
INIT_APIS = (
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommSplit",
    "ncclCommInitAll",
    "ncclCommGrow",
)
REDOPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}

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

# entry name -> field of a decoded payload
ENTRY_FIELDS = {
    "nccl communicator id": "comm",
    "message size [bytes]": "msg_bytes",
    "reduction operation": "redop",
    "root": "root",
    "peer rank": "peer",
    "no. of ranks": "nranks",
    "rank": "rank",
    "cuda device": "device",
    "no. of devices": "ndev",
}


@dataclass
class Schema:
    schema_id: int
    size: int | None
    entries: list[tuple[str, int, int]] = field(default_factory=list)  # (field, type, offset)


def load_schemas(rows_schemas, rows_entries) -> dict[int, Schema]:
    """NVTX_PAYLOAD_SCHEMAS rows (schemaId, payloadSize) and NVTX_PAYLOAD_SCHEMA_ENTRIES rows
    (schemaId, idx, type, name, offset) -> schemaId -> Schema (duplicates, one per process, collapse).
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
            fmt = _fmt(typ)
            width = _NATURAL.get(fmt, 8)
            if off is None:
                off = (pos + width - 1) // width * width
            off = int(off)
            pos = off + width
            f = ENTRY_FIELDS.get((name or "").strip().lower())
            if f:
                sch.entries.append((f, typ, off))
        if sch.size is None:
            sch.size = pos
        out[sid] = sch
    return out


def _fmt(typ: int | None) -> str:
    if typ is None:
        return "Q"
    if typ >= SCHEMA_BASE:  # a registered schema used as a type: NCCL's ncclRedOp_t enum (4 bytes)
        return "i"
    return _ENTRY_FORMATS.get(typ, "Q")


def blob_bytes(value) -> bytes | None:
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


def decode_binary(value, schemas: dict[int, Schema], schema_id: int | None = None) -> dict:
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
        fmt = _fmt(typ)
        if off + _NATURAL[fmt] <= len(data):
            out[f] = struct.unpack_from("<" + fmt, data, off)[0]
    return out


def decode_json(text) -> dict:
    """jsonText -> fields: the first JSON object (at any depth) whose keys are schema entry names."""
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
                ENTRY_FIELDS[k.strip().lower()]: v
                for k, v in o.items()
                if isinstance(k, str) and k.strip().lower() in ENTRY_FIELDS
            }
            if hits:
                return {k: _json_value(k, v) for k, v in hits.items()}
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return {}


def _json_value(key, v):
    if key == "redop" and isinstance(v, str):
        low = v.strip().lower()
        return {"product": "prod"}.get(low, low)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return v
    return v


def redop_name(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    return REDOPS.get(int(v), f"premulsum{int(v)}" if int(v) >= 5 else str(v))


def api_op(name: str | None, schema_id: int | None = None) -> str | None:
    if name and name.startswith("nccl"):
        return API_OPS.get(name[4:])
    if schema_id is not None:
        k = schema_id - SCHEMA_BASE
        return API_OPS.get(SCHEMA_OPS.get(k) or SCHEMA_OPS_228.get(k, ""))
    return None


def nccl_tests_bytes(op: str | None, msg_bytes, nranks) -> int | None:
    """NCCL's payload size -> nccl-tests S (docs/architecture.md, "Message size and bus bandwidth"): all_gather / reduce_scatter / gather / scatter
    carry the per-rank size: S = n x that (None when n is unknown); the others are S already."""
    if msg_bytes is None or op is None:
        return None
    if op in ("all_gather", "reduce_scatter", "gather", "scatter"):
        return int(msg_bytes) * int(nranks) if nranks else None
    return int(msg_bytes)


# --------------------------------------------------------------------------- units (group semantics)


def build_units(events: pd.DataFrame, comm_sizes: dict) -> pd.DataFrame:
    """NCCL ranges of one report (globalTid, start, end, name, fields...) -> one row per unit:
    globalTid, start, end (the interval whose launches are its kernels), op, api, bytes, group,
    group_size, members. ``comm_sizes``: comm id -> nranks (from the init payloads)."""
    rows = []
    for gtid, ev in events.sort_values(["globalTid", "start", "end"]).groupby("globalTid", sort=False):
        depth, members = 0, []
        for e in ev.itertuples(index=False):
            if e.name == "ncclGroupStart":
                if depth == 0:
                    members = []
                depth += 1
            elif e.name == "ncclGroupEnd":
                if depth == 0:
                    continue  # its ncclGroupStart is outside the capture window
                depth -= 1
                if depth == 0 and members:
                    rows.append(_unit(gtid, e.start, e.end, members, comm_sizes, grouped=True))
            elif api_op(e.name) is not None:
                if depth > 0:
                    members.append(e)
                else:
                    rows.append(_unit(gtid, e.start, e.end, [e], comm_sizes, grouped=False))
    cols = ["globalTid", "start", "end", "op", "api", "bytes", "group", "group_size", "redop", "members"]
    return pd.DataFrame(rows, columns=cols)


def _unit(gtid, start, end, members, comm_sizes, grouped: bool) -> dict:
    ops = [api_op(m.name) for m in members]
    comms = {m.comm for m in members if _present(m.comm)}
    comm = next(iter(comms)) if len(comms) == 1 else None
    n = comm_sizes.get(comm) if comm is not None else None
    names = pd.Series([m.name for m in members]).value_counts()
    api = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in names.items())
    if grouped:
        api = f"ncclGroupEnd({api})"
    redops = {redop_name(m.redop) for m in members if _present(m.redop)}
    if set(ops) <= {"send", "recv"}:
        send_b = sum(int(m.msg_bytes) for m, o in zip(members, ops) if o == "send" and _present(m.msg_bytes))
        recv_b = sum(int(m.msg_bytes) for m, o in zip(members, ops) if o == "recv" and _present(m.msg_bytes))
        peers_s = {int(m.peer) for m, o in zip(members, ops) if o == "send" and _present(m.peer)}
        peers_r = {int(m.peer) for m, o in zip(members, ops) if o == "recv" and _present(m.peer)}
        if not peers_s and not peers_r and not any(_present(m.msg_bytes) for m in members):
            op = None  # no payload: the kernels (or the enclosing PyTorch range) tell
            nbytes = None
        elif (n and n > 1 and len(peers_s) >= n - 1 and len(peers_r) >= n - 1) or (
            not n and len(peers_s) >= 2 and peers_s == peers_r
        ):
            op, nbytes = "all_to_all", send_b
        elif "send" in ops:
            op, nbytes = "send", send_b  # a send (paired with receives in a sendrecv group)
        else:
            op, nbytes = "recv", recv_b
        if op is not None and not any(_present(m.msg_bytes) for m in members):
            nbytes = None
    elif len(set(ops)) == 1:
        op = ops[0]
        parts = [nccl_tests_bytes(op, m.msg_bytes if _present(m.msg_bytes) else None, n) for m in members]
        nbytes = None if any(p is None for p in parts) else sum(parts)
    else:
        op, nbytes = None, None  # mixed collectives in one group: the kernels tell
    return {
        "globalTid": gtid,
        "start": start,
        "end": end,
        "op": op,
        "api": api,
        "bytes": nbytes,
        "group": None if comm is None else str(comm),
        "group_size": n,
        "redop": ",".join(sorted(redops)) or None,
        "members": len(members),
    }


def _present(v) -> bool:
    return v is not None and not (isinstance(v, float) and v != v) and v is not pd.NA


# --------------------------------------------------------------------------- reading a report


def _meta(con, tables) -> dict:
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables:
            return dict(con.execute(f"SELECT name, value FROM {t} WHERE name LIKE 'EXPORT_PARAM_INCLUDE_%'").fetchall())
    return {}


def _sqlite(path):
    import sqlite3

    from nsyscomm.ingest.nsys.reader import read_only_uri

    return sqlite3.connect(read_only_uri(path), uri=True)


def read_events(path, tables, warnings: list[str], report: str = "") -> tuple[pd.DataFrame, dict]:
    """NCCL-domain ranges of the report at ``path`` with decoded payload fields.
    Returns (events, schemas); events has globalTid, start, end, name, comm, msg_bytes, redop,
    root, peer, nranks, rank, device.

    Read with Python's sqlite3, not DuckDB: nsys declares binaryData TEXT but a blob may hold
    any bytes, which DuckDB's SQLite scanner refuses as invalid UTF-8."""
    cols = [
        "globalTid",
        "start",
        "end",
        "name",
        "comm",
        "msg_bytes",
        "redop",
        "root",
        "peer",
        "nranks",
        "rank",
        "device",
    ]
    empty = pd.DataFrame(columns=cols)
    nv = tables.get("NVTX_EVENTS")
    if nv is None:
        return empty, {}
    con = _sqlite(path)
    con.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
    try:
        return _read_events(con, tables, nv, warnings, report, cols, empty)
    finally:
        con.close()


def _read_events(con, tables, nv, warnings, report, cols, empty):
    schemas: dict[int, Schema] = {}
    if "NVTX_PAYLOAD_SCHEMA_ENTRIES" in tables:
        srows = (
            con.execute("SELECT schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS").fetchall()
            if "NVTX_PAYLOAD_SCHEMAS" in tables
            else []
        )
        erows = con.execute('SELECT schemaId, idx, type, name, "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES').fetchall()
        schemas = load_schemas(srows, erows)
    has = {c: (c in nv) for c in ("textId", "domainId", "binaryData", "jsonText", "jsonTextId")}
    name_expr = "coalesce(e.text, s.value)" if has["textId"] else "e.text"
    join = "LEFT JOIN StringIds s ON s.id = e.textId" if has["textId"] else ""
    bin_expr = "e.binaryData" if has["binaryData"] else "NULL"
    json_expr = "e.jsonText" if has["jsonText"] else "NULL"
    if has["jsonTextId"]:
        json_expr = f"coalesce({json_expr}, (SELECT value FROM StringIds j WHERE j.id = e.jsonTextId))"
    # NCCL's domain: by its create event when inside the window, else by the schemas NCCL registered
    domains = set()
    if has["domainId"]:
        domains = {
            int(r[0])
            for r in con.execute(
                "SELECT DISTINCT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'NCCL'"
            ).fetchall()
            if r[0] is not None
        }
        if "NVTX_PAYLOAD_SCHEMA_ENTRIES" in tables:
            domains |= {
                int(r[0])
                for r in con.execute(
                    "SELECT DISTINCT domainId FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name = 'NCCL communicator ID'"
                ).fetchall()
            }
    dom_filter = f"AND e.domainId IN ({','.join(map(str, sorted(domains)))})" if domains else ""
    rows = con.execute(f"""
        SELECT e.globalTid, e.start, coalesce(e."end", e.start) AS "end", {name_expr} AS name,
               {bin_expr} AS bin, {json_expr} AS js
        FROM NVTX_EVENTS e {join}
        WHERE e.eventType IN (59, 60) {dom_filter} AND {name_expr} LIKE 'nccl%' AND {name_expr} NOT LIKE 'nccl:%'
        ORDER BY e.globalTid, e.start
    """).fetchall()
    if not rows:
        return empty, schemas
    out, with_payload = [], 0
    for gtid, start, end, name, b, js in rows:
        f = decode_json(js) if js else {}
        if not f and b is not None:
            if isinstance(b, str):  # TEXT read back: undo surrogateescape to the original bytes
                b = b.encode("utf-8", "surrogateescape")
                try:
                    b = blob_bytes(b.decode("ascii"))
                except UnicodeDecodeError:
                    pass
            f = decode_binary(b, schemas, _schema_for(name, schemas))
        if f:
            with_payload += 1
        comm = f.get("comm")
        if isinstance(comm, int):  # a string from the start: a u64 id does not survive float columns
            comm = f"0x{comm & 0xFFFFFFFFFFFFFFFF:016x}"
        out.append(
            (
                gtid,
                start,
                end,
                name,
                comm,
                f.get("msg_bytes"),
                f.get("redop"),
                f.get("root"),
                f.get("peer"),
                f.get("nranks"),
                f.get("rank"),
                f.get("device"),
            )
        )
    ev = pd.DataFrame(out, columns=cols)
    payload_calls = ev["name"].map(lambda n: api_op(n) is not None or n in INIT_APIS).sum()
    if payload_calls and not with_payload:
        meta = _meta(con, tables)
        missing = []
        if meta.get("EXPORT_PARAM_INCLUDE_BLOBS", "").lower() != "true":
            missing.append("--include-blobs=true")
        if meta.get("EXPORT_PARAM_INCLUDE_JSON", "").lower() != "true":
            missing.append("--include-json=true")
        flags = " ".join(missing) or "--include-blobs=true"
        why = (
            f"EXPORT_PARAM_INCLUDE_BLOBS={meta.get('EXPORT_PARAM_INCLUDE_BLOBS')}, "
            f"EXPORT_PARAM_INCLUDE_JSON={meta.get('EXPORT_PARAM_INCLUDE_JSON')}"
            if meta
            else "no export parameters"
        )
        warnings.append(
            f"{report}: {int(payload_calls)} NCCL NVTX range(s) without payload values ({why}): "
            f"message sizes and communicators unknown; export again with "
            f"nsys export --type sqlite {flags} REPORT.nsys-rep"
        )
    return ev, schemas


def _schema_for(name: str | None, schemas: dict[int, Schema]) -> int | None:
    """The schema of a named NCCL range, when its (stable) id is registered in this report and has
    the entries that op needs; None lets decode_binary pick by header/size."""
    if not name:
        return None
    api = name[4:] if name.startswith("nccl") else name
    for k, v in list(SCHEMA_OPS.items()) + list(SCHEMA_OPS_228.items()):
        if v == api and SCHEMA_BASE + k in schemas:
            sch = schemas[SCHEMA_BASE + k]
            if any(f == "msg_bytes" for f, _t, _o in sch.entries):
                return SCHEMA_BASE + k
    if name in INIT_APIS:
        for k in (0, 11, 12):
            sch = schemas.get(SCHEMA_BASE + k)
            if sch and any(f == "rank" for f, _t, _o in sch.entries):
                return SCHEMA_BASE + k
    return None


def rank_markers(events: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(markers: pid, rank, local_rank, world, host) from ncclCommInitRank* payloads, taking each
    process's largest communicator (the world), and comm id -> nranks for every communicator."""
    init = events[events["name"].isin(INIT_APIS) & events["nranks"].notna()]
    sizes = {c: int(n) for c, n in zip(init["comm"], init["nranks"]) if _present(c)}
    rows = []
    if len(init):
        init = init.assign(pid=[(int(g) >> 24) & 0xFFFFFF for g in init["globalTid"]])
        for pid, g in init.sort_values("start").groupby("pid"):
            top = g.loc[g["nranks"].astype(int).idxmax()]
            if _present(top["rank"]):
                rows.append((int(pid), int(top["rank"]), None, int(top["nranks"]), None))
    markers = pd.DataFrame(rows, columns=["pid", "rank", "local_rank", "world", "host"])
    return markers, sizes


def units_with_kernels(con, units: pd.DataFrame) -> pd.DataFrame:
    """Attach to each unit the NCCL kernels launched inside it on the same thread (needs the
    temp table nccl_kernels of nsyscomm.ingest.nsys.extract.extract): k_first, k_last, kernels."""
    if not len(units):
        return units.assign(
            k_first=pd.Series(dtype="Int64"), k_last=pd.Series(dtype="Int64"), kernels=pd.Series(dtype="Int64")
        )
    u = units.reset_index(drop=True).assign(uid=lambda d: range(len(d)))
    con.register("payload_units_df", u[["uid", "globalTid", "start", "end"]].astype("int64"))
    con.execute(
        "CREATE OR REPLACE TEMP TABLE payload_units AS SELECT uid::BIGINT AS uid, globalTid::BIGINT AS gtid, "
        'start::BIGINT AS ustart, "end"::BIGINT AS uend FROM payload_units_df'
    )
    con.unregister("payload_units_df")
    # (DuckDB 1.5 has no merge join for this shape with prefer_range_joins; units are few per thread)
    con.execute("SET prefer_range_joins = false")
    got = con.execute("""
        SELECT u.uid, min(k.kstart) AS k_first, max(k.kend) AS k_last, count(*) AS kernels
        FROM payload_units u JOIN nccl_kernels k ON k.launch_tid = u.gtid
        WHERE k.launch_start BETWEEN u.ustart AND u.uend
        GROUP BY u.uid""").df()
    con.execute("SET prefer_range_joins = true")
    return u.merge(got, on="uid", how="left")


def apply(con, tables: dict, calls, markers: pd.DataFrame, warnings: list[str], report: str, path) -> tuple:
    """The hook for nsyscomm.ingest.nsys.extract.extract: decode NCCL's payloads, fill the calls they describe,
    and add ranks from ncclCommInitRank for processes without a wrapper marker.

    - A call row (torch_range or kernel_name) whose first kernel is the first kernel of a unit on
      the same process and thread gets bytes/group/group_size from the unit (bytes summed when
      one row spans several units) and source 'nccl_payload'; kernel_name rows also take the
      unit's op and api. Wrapper rows are left alone (the wrapper is the better source).
    - Units without any kernel become rows of their own (source 'nccl_payload', CPU times only)
      when the report has no CUDA kernels at all (captured with --trace=nvtx); otherwise they
      are kernels outside the capture window and are only counted in a warning."""
    # NCCL's API ranges are among the ranges nsyscomm.ingest.nsys.extract already picked out: without any, the
    # report needs no second read (the payload read goes through sqlite3, see read_events)
    if not con.execute("SELECT count(*) FROM src_ranges WHERE name LIKE 'nccl%' AND name NOT LIKE 'nccl:%'").fetchone()[
        0
    ]:
        return calls, markers
    events, _schemas = read_events(path, tables, warnings, report)
    if not len(events):
        return calls, markers
    new_markers, sizes = rank_markers(events)
    units = build_units(events, sizes)
    if len(new_markers):
        known = set(markers["pid"].dropna().astype(int)) if len(markers) else set()
        add = new_markers[~new_markers["pid"].isin(known)]
        if len(add):
            markers = pd.concat([markers, add], ignore_index=True) if len(markers) else add.reset_index(drop=True)
    if not len(units):
        return calls, markers
    has_kernels = "CUPTI_ACTIVITY_KIND_KERNEL" in tables
    units = units_with_kernels(con, units) if has_kernels else units.assign(k_first=None, k_last=None, kernels=0)
    # the calls (Arrow) are changed row by row here: in pandas, then back
    calls = duck.arrow_frame(calls)
    for c in ("bytes", "group", "group_size", "op", "api", "source"):
        if c not in calls:
            calls[c] = None
    calls["bytes"] = calls["bytes"].astype("object")
    calls["group_size"] = calls["group_size"].astype("object")
    # units that carry payload values (without blobs/JSON there is nothing to add)
    ku = units[units["k_first"].notna() & (units["bytes"].notna() | units["group"].notna())].copy()
    if len(ku):
        ku["pid"] = [(int(g) >> 24) & 0xFFFFFF for g in ku["globalTid"]]
        ku["tid"] = [int(g) & 0xFFFFFF for g in ku["globalTid"]]
        eligible = calls["source"].isin(["torch_range", "kernel_name"]) & calls["gpu_start"].notna()
        idx = {}
        for i, r in calls[eligible].iterrows():
            idx.setdefault((int(r["pid"]), None if pd.isna(r["tid"]) else int(r["tid"])), []).append(i)
        matched = 0
        per_row: dict[int, list] = {}
        for u in ku.itertuples():
            rows = idx.get((int(u.pid), int(u.tid)), [])
            hit = [i for i in rows if calls.at[i, "gpu_start"] <= u.k_first <= calls.at[i, "gpu_end"]]
            if hit:
                per_row.setdefault(hit[0], []).append(u)
                matched += 1
        for i, us in per_row.items():
            b = [u.bytes for u in us]
            calls.at[i, "bytes"] = None if any(not _present(x) for x in b) else int(sum(b))
            groups = {u.group for u in us if u.group}
            if len(groups) == 1:
                calls.at[i, "group"] = groups.pop()
            sizes_ = {u.group_size for u in us if _present(u.group_size)}
            if len(sizes_) == 1:
                calls.at[i, "group_size"] = int(sizes_.pop())
            if calls.at[i, "source"] == "kernel_name":
                ops_ = {u.op for u in us if u.op}
                if len(ops_) == 1:
                    calls.at[i, "op"] = ops_.pop()
                calls.at[i, "api"] = us[0].api if len(us) == 1 else f"{us[0].api} x{len(us)}"
            calls.at[i, "source"] = "nccl_payload"
    orphan = units[units["k_first"].isna()]
    if len(orphan):
        if not has_kernels:
            extra = pd.DataFrame(
                {
                    "pid": [(int(g) >> 24) & 0xFFFFFF for g in orphan["globalTid"]],
                    "tid": [int(g) & 0xFFFFFF for g in orphan["globalTid"]],
                    "op": orphan["op"],
                    "api": orphan["api"],
                    "bytes": orphan["bytes"],
                    "group": orphan["group"],
                    "group_size": orphan["group_size"],
                    "cpu_start": orphan["start"],
                    "cpu_end": orphan["end"],
                    "source": "nccl_payload",
                    "kernels": 0,
                }
            )
            calls = pd.concat([calls, extra], ignore_index=True)
        else:
            warnings.append(
                f"{report}: {len(orphan)} NCCL call(s) launched no kernel inside the report "
                f"(capture window edge): not counted"
            )
    return duck.frame_arrow(calls), markers
