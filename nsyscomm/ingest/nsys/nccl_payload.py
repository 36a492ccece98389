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

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd

from nsyscomm import duck
from nsyscomm.ingest.nsys import nccl_orphans, nvtx_payload
from nsyscomm.ingest.nsys.nccl_api import (
    ENTRY_FIELDS,
    INIT_APIS,
    SCHEMA_OPS,
    SCHEMA_OPS_228,
    api_op,
    build_units,
    json_value,
    nccl_tests_bytes,
    present,
    redop_name,
)
from nsyscomm.ingest.nsys.nvtx_payload import SCHEMA_BASE, Schema, blob_bytes, decode_binary

if TYPE_CHECKING:
    import sqlite3

    import duckdb
    import pyarrow as pa

__all__ = [
    "apply",
    "api_op",
    "build_units",
    "decode_binary",
    "load_schemas",
    "nccl_tests_bytes",
    "read_events",
    "redop_name",
]


def load_schemas(
    rows_schemas: Iterable[tuple[int, int | None]],
    rows_entries: Iterable[tuple[int, int, int | None, str | None, int | None]],
) -> dict[int, Schema]:
    """The report's payload layouts with NCCL's entries (nvtx_payload.load_schemas)."""
    return nvtx_payload.load_schemas(rows_schemas, rows_entries, ENTRY_FIELDS)


def decode_json(text: object) -> dict:
    """A jsonText payload's NCCL fields (nvtx_payload.decode_json)."""
    return nvtx_payload.decode_json(text, ENTRY_FIELDS, json_value)


def _meta(con, tables) -> dict:
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if t in tables:
            return dict(con.execute(f"SELECT name, value FROM {t} WHERE name LIKE 'EXPORT_PARAM_INCLUDE_%'").fetchall())
    return {}


def _sqlite(path: str | os.PathLike) -> sqlite3.Connection:
    import sqlite3

    from nsyscomm.ingest.nsys.reader import read_only_uri

    return sqlite3.connect(read_only_uri(path), uri=True)


def read_events(
    path: str | os.PathLike, tables: dict[str, set[str]], warnings: list[str], report: str = ""
) -> tuple[pd.DataFrame, dict]:
    """NCCL-domain ranges of the report at ``path`` with decoded payload fields.
    Returns (events, schemas); events has globalTid, start, end, name, comm, msg_bytes, redop,
    root, peer, nranks, rank, device, seq.

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
        "seq",
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


def _read_events(
    con: sqlite3.Connection,
    tables: dict[str, set[str]],
    nv: set[str],
    warnings: list[str],
    report: str,
    cols: list[str],
    empty: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[int, Schema]]:
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
    domains = _nccl_domains(con, tables) if has["domainId"] else set()
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
                f.get("seq") if isinstance(f.get("seq"), int) and 0 <= f["seq"] < 1 << 62 else None,
            )
        )
    ev = pd.DataFrame(out, columns=cols)
    payload_calls = ev["name"].map(lambda n: api_op(n) is not None or n in INIT_APIS).sum()
    if payload_calls and not with_payload:
        warnings.append(_no_payload_warning(con, tables, report, int(payload_calls)))
    return ev, schemas


def _nccl_domains(con: sqlite3.Connection, tables: dict[str, set[str]]) -> set[int]:
    """NCCL's NVTX domain: by its create event when inside the window, else by the schemas NCCL
    registered."""
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
    return domains


def _no_payload_warning(con: sqlite3.Connection, tables: dict[str, set[str]], report: str, payload_calls: int) -> str:
    """Why NCCL's ranges carry no payload values (the export's flags) and how to export again."""
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
    return (
        f"{report}: {payload_calls} NCCL NVTX range(s) without payload values ({why}): "
        f"message sizes and communicators unknown; export again with "
        f"nsys export --type sqlite {flags} REPORT.nsys-rep"
    )


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
            init = schemas.get(SCHEMA_BASE + k)
            if init and any(f == "rank" for f, _t, _o in init.entries):
                return SCHEMA_BASE + k
    return None


def rank_markers(events: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(markers: pid, rank, local_rank, world, host) from ncclCommInitRank* payloads, taking each
    process's largest communicator (the world), and comm id -> nranks for every communicator."""
    init = events[events["name"].isin(INIT_APIS) & events["nranks"].notna()]
    sizes = {c: int(n) for c, n in zip(init["comm"], init["nranks"]) if present(c)}
    rows = []
    if len(init):
        init = init.assign(pid=[(int(g) >> 24) & 0xFFFFFF for g in init["globalTid"]])
        for pid, g in init.sort_values("start").groupby("pid"):
            top = g.loc[g["nranks"].astype(int).idxmax()]
            if present(top["rank"]):
                rows.append((int(pid), int(top["rank"]), None, int(top["nranks"]), None))
    markers = pd.DataFrame(rows, columns=["pid", "rank", "local_rank", "world", "host"])
    return markers, sizes


def units_with_kernels(con: duckdb.DuckDBPyConnection, units: pd.DataFrame) -> pd.DataFrame:
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


def apply(
    con: duckdb.DuckDBPyConnection,
    tables: dict,
    calls: pa.Table,
    markers: pd.DataFrame,
    warnings: list[str],
    report: str,
    path: str | os.PathLike,
) -> tuple:
    """The hook for nsyscomm.ingest.nsys.extract.extract: decode NCCL's payloads, fill the calls they describe,
    and add ranks from ncclCommInitRank for processes without a wrapper marker.

    - A call row (torch_range or kernel_name) whose first kernel is the first kernel of a unit on
      the same process and thread gets bytes/group/group_size from the unit (bytes summed when
      one row spans several units) and source 'nccl_payload'; kernel_name rows also take the
      unit's op and api. Wrapper rows are left alone (the wrapper is the better source).
    - Units without any kernel become rows of their own (source 'nccl_payload', CPU times only)
      when the report has no CUDA kernels at all (captured with --trace=nvtx), and otherwise
      those nsyscomm.ingest.nsys.nccl_orphans counts (no range of the wrapper or PyTorch holds them,
      and the capture goes on after them)."""
    # NCCL's API ranges are among the ranges nsyscomm.ingest.nsys.extract already picked out: without any, the
    # report needs no second read (the payload read goes through sqlite3, see read_events)
    if not duck.scalar(con, "SELECT count(*) FROM src_ranges WHERE name LIKE 'nccl%' AND name NOT LIKE 'nccl:%'"):
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
    for c in ("bytes", "group", "group_size", "op", "api", "source", "seq"):
        if c not in calls:
            calls[c] = None
    for c in ("bytes", "group_size", "seq"):
        calls[c] = calls[c].astype("object")
    # units that carry payload values (without blobs/JSON there is nothing to add)
    ku = units[units["k_first"].notna() & (units["bytes"].notna() | units["group"].notna())].copy()
    if len(ku):
        ku["pid"] = [(int(g) >> 24) & 0xFFFFFF for g in ku["globalTid"]]
        ku["tid"] = [int(g) & 0xFFFFFF for g in ku["globalTid"]]
        eligible = calls["source"].isin(["torch_range", "kernel_name"]) & calls["gpu_start"].notna()
        idx: dict[tuple[int, int | None], list[Any]] = {}
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
            calls.at[i, "bytes"] = None if any(not present(x) for x in b) else int(sum(b))
            groups = {u.group for u in us if u.group}
            if len(groups) == 1:
                calls.at[i, "group"] = groups.pop()
            sizes_ = {u.group_size for u in us if present(u.group_size)}
            if len(sizes_) == 1:
                calls.at[i, "group_size"] = int(sizes_.pop())
            if len(us) == 1 and present(us[0].seq) and us[0].group:
                calls.at[i, "seq"] = int(us[0].seq)  # NCCL's own: matched across ranks exactly
            if calls.at[i, "source"] == "kernel_name":
                ops_ = {u.op for u in us if u.op}
                if len(ops_) == 1:
                    calls.at[i, "op"] = ops_.pop()
                calls.at[i, "api"] = us[0].api if len(us) == 1 else f"{us[0].api} x{len(us)}"
            calls.at[i, "source"] = "nccl_payload"
    orphan = units[units["k_first"].isna()]
    if len(orphan):
        # without any kernel in the report (--trace=nvtx) every one is a call; else
        # nsyscomm.ingest.nsys.nccl_orphans tells which are
        keep = orphan if not has_kernels else nccl_orphans.to_count(con, tables, orphan, calls, warnings, report)
        if len(keep):
            calls = pd.concat([calls, nccl_orphans.rows(keep)], ignore_index=True)
    return duck.frame_arrow(calls), markers
