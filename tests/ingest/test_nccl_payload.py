"""NCCL's own NVTX payloads: decoding, group semantics, nccl-tests sizes, ranks.

Reports are generated here as small SQLite files with the nsys 2026.2 column layout
(shared/real/SCHEMA_nsys2026.2.1_schema3.25.0_mfu_2gpu_before.sql) and payload schemas as
NCCL 2.27 registers them (checked against the real 2xH100 export's NVTX_PAYLOAD_* tables).
"""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

import pandas as pd
import pytest

from nsyscomm import api
from nsyscomm.duck import arrow_frame
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import nccl_payload
from nsyscomm.ingest.nsys import reader as nsys_reader
from tests.conftest import REAL_NSYS

REAL = REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite"
B = 1 << 24
REDOP_ENUM = B + 16  # NCCL 2.27's id for the ncclRedOp_t enum schema (11/14/24 in other releases)

# (schemaId, payloadSize, [(idx, type, name, offset)]) as in the real export (2.27)
SCHEMAS = [
    (
        B + 0,
        24,
        [
            (0, 18, "NCCL communicator ID", None),
            (1, 5, "No. of ranks", 8),
            (2, 5, "Rank", 12),
            (3, 5, "CUDA device", 16),
        ],
    ),
    (B + 4, 16, [(0, 18, "NCCL communicator ID", None), (1, 22, "Message size [bytes]", 8)]),
    (
        B + 5,
        24,
        [
            (0, 18, "NCCL communicator ID", None),
            (1, 22, "Message size [bytes]", 8),
            (2, REDOP_ENUM, "Reduction operation", 16),
        ],
    ),
    (
        B + 7,
        24,
        [
            (0, 18, "NCCL communicator ID", None),
            (1, 22, "Message size [bytes]", 8),
            (2, REDOP_ENUM, "Reduction operation", 16),
        ],
    ),
    (B + 9, 24, [(0, 18, "NCCL communicator ID", None), (1, 22, "Message size [bytes]", 8), (2, 5, "Peer rank", 16)]),
    (B + 10, 24, [(0, 18, "NCCL communicator ID", None), (1, 22, "Message size [bytes]", 8), (2, 5, "Peer rank", 16)]),
]
COMM = 0x363AC963D9C3B653


def _pack(sid, **v) -> bytes:
    if sid == B + 0:
        return struct.pack("<Qiii4x", v["comm"], v["nranks"], v["rank"], v["device"])
    if sid == B + 4:
        return struct.pack("<QQ", v["comm"], v["size"])
    return struct.pack("<QQi4x", v["comm"], v["size"], v.get("x", 0))


DDL = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
    int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, flags INTEGER,
    numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER);
CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, idx INTEGER NOT NULL,
    flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
    globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
"""

KERNELS = {
    "all_reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "all_gather": "ncclDevKernel_AllGather_RING_LL",
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
    "sendrecv": "ncclDevKernel_SendRecv",
}


def make_report(
    path: Path, encoding: str = "blob", init: bool = True, domain_create: bool = True, header: bool = False
) -> Path:
    """Two processes (pids 100, 200 = ranks 0, 1 of one communicator) each doing, in order:
    ncclAllReduce 1 MiB; ncclAllGather 4096 B/rank; ncclReduceScatter 2048 B/rank;
    a group {Send 512 -> 0, Send 512 -> 1, Recv 512 <- 0, Recv 512 <- 1} (all_to_all);
    a group {ncclAllReduce 100, ncclAllReduce 300} (coalesced). Rank 1 runs 10 us late."""
    con = sqlite3.connect(path)
    con.executescript(DDL)
    strings = {}

    def sid(s):
        if s not in strings:
            strings[s] = len(strings) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[s], s))
        return strings[s]

    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2026.2.1.210')")
    con.execute(
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INCLUDE_BLOBS', ?)",
        ("true" if encoding in ("blob", "hex") else "false",),
    )
    con.execute(
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INCLUDE_JSON', ?)",
        ("true" if encoding == "json" else "false",),
    )
    for schema_id, size, entries in SCHEMAS:
        con.execute(
            "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (1, ?, NULL, 1, NULL, ?, ?, NULL)", (schema_id, len(entries), size)
        )
        for idx, typ, name, off in entries:
            con.execute(
                "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (1, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
                (schema_id, idx, typ, name, off),
            )
    corr = {100: 0, 200: 0}

    def rng(pid, t0, t1, name, schema=None, **v):
        gtid = (pid << 24) | pid
        blob = js = None
        if schema is not None and encoding != "none":
            raw = _pack(schema, **v)
            if header:
                raw = struct.pack("<QQ", schema, len(raw)) + raw
            if encoding == "blob":
                blob = raw
            elif encoding == "hex":
                blob = raw.hex()
            elif encoding == "json":
                names = {e[2]: e for e in dict((s[0], s[2]) for s in SCHEMAS)[schema]}
                obj = {}
                for n in names:
                    key = {
                        "NCCL communicator ID": "comm",
                        "No. of ranks": "nranks",
                        "Rank": "rank",
                        "CUDA device": "device",
                        "Message size [bytes]": "size",
                        "Reduction operation": "x",
                        "Peer rank": "x",
                    }[n]
                    val = v[key]
                    obj[n] = ["Sum", "Product", "Max", "Min", "Avg"][val] if n == "Reduction operation" else val
                js = json.dumps(obj)
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId, jsonText, binaryData) "
            "VALUES (?, ?, 59, ?, ?, 1, ?, ?)",
            (t0, t1, gtid, sid(name), js, blob),
        )

    def launch(pid, t, kernel, k0, k1):
        corr[pid] += 1
        gtid = (pid << 24) | pid
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
            (t, t + 2_000, gtid, corr[pid], sid("cudaLaunchKernel")),
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, NULL, 7, ?, ?, ?, ?, NULL)",
            (k0, k1, pid // 100 - 1, corr[pid], pid << 24, sid(kernel), sid(kernel)),
        )

    for rank, pid in enumerate((100, 200)):
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (pid << 24, pid))
        if domain_create:
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (10, 75, 'NCCL', ?, 1)",
                ((pid << 24) | pid,),
            )
        late = 10_000 * rank
        if init:
            rng(pid, 1_000, 50_000, "ncclCommInitRank", B + 0, comm=COMM, nranks=2, rank=rank, device=rank)
        t = 100_000 + late
        rng(pid, t, t + 5_000, "ncclAllReduce", B + 5, comm=COMM, size=1 << 20, x=0)
        launch(pid, t + 1_000, KERNELS["all_reduce"], 200_000, 260_000)
        t = 300_000 + late
        rng(pid, t, t + 5_000, "ncclAllGather", B + 4, comm=COMM, size=4096)
        launch(pid, t + 1_000, KERNELS["all_gather"], 320_000, 330_000)
        t = 400_000 + late
        rng(pid, t, t + 5_000, "ncclReduceScatter", B + 7, comm=COMM, size=2048, x=0)
        launch(pid, t + 1_000, KERNELS["reduce_scatter"], 420_000, 425_000)
        t = 500_000 + late
        rng(pid, t, t + 100, "ncclGroupStart")
        for i, (name, peer) in enumerate((("ncclSend", 0), ("ncclSend", 1), ("ncclRecv", 0), ("ncclRecv", 1))):
            rng(
                pid,
                t + 200 + 100 * i,
                t + 250 + 100 * i,
                name,
                B + 9 if name == "ncclSend" else B + 10,
                comm=COMM,
                size=512,
                x=peer,
            )
        rng(pid, t + 1_000, t + 5_000, "ncclGroupEnd")
        launch(pid, t + 2_000, KERNELS["sendrecv"], 520_000, 540_000)
        t = 600_000 + late
        rng(pid, t, t + 100, "ncclGroupStart")
        rng(pid, t + 200, t + 300, "ncclAllReduce", B + 5, comm=COMM, size=100, x=2)
        rng(pid, t + 400, t + 500, "ncclAllReduce", B + 5, comm=COMM, size=300, x=2)
        rng(pid, t + 1_000, t + 5_000, "ncclGroupEnd")
        launch(pid, t + 2_000, KERNELS["all_reduce"], 620_000, 630_000)
    con.commit()
    con.close()
    return path


def _extract(path):
    return nsys_extract.extract(path)  # extract() applies the payload hook itself


def _rows(e):
    return arrow_frame(e.calls).sort_values(["pid", "gpu_start"]).reset_index(drop=True)


@pytest.mark.parametrize("encoding,header", [("blob", False), ("hex", False), ("json", False), ("blob", True)])
def test_payload_decoded_to_nccl_tests_sizes(tmp_path, encoding, header):
    e = _extract(make_report(tmp_path / "r.sqlite", encoding=encoding, header=header))
    c = _rows(e)
    assert len(c) == 10
    assert set(c["source"]) == {"nccl_payload"}
    r0 = c[c["pid"] == 100].reset_index(drop=True)
    assert list(r0["op"]) == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_reduce"]
    # all_gather: 4096 per rank x 2; reduce_scatter: 2048 per rank x 2; all_to_all: 2 x 512 sent; coalesced: 100 + 300
    assert [int(b) for b in r0["bytes"]] == [1 << 20, 8192, 4096, 1024, 400]
    assert set(r0["group"]) == {f"0x{COMM:016x}"}
    assert set(r0["group_size"]) == {2}
    assert r0.loc[3, "api"] == "ncclGroupEnd(ncclSend x2, ncclRecv x2)"
    assert r0.loc[4, "api"] == "ncclGroupEnd(ncclAllReduce x2)"
    assert sorted(e.markers[["pid", "rank"]].itertuples(index=False, name=None)) == [(100, 0), (200, 1)]


def test_pipeline_ranks_and_summary(tmp_path):
    e = _extract(make_report(tmp_path / "r.sqlite"))
    res = api.combine([e])
    col = res.collectives
    assert sorted(col.groupby("rank")["pid"].first().items()) == [(0, 100), (1, 200)]
    s = res.summary.set_index(["op", "bytes"])
    assert s.loc[("all_reduce", 1 << 20), "count"] == 1
    assert s.loc[("all_reduce", 1 << 20), "avg_ms"] == pytest.approx(0.06)  # 60 us kernel
    assert s.loc[("all_gather", 8192), "busbw_GBps"] == pytest.approx(8192 / 10e-6 / 1e9 * 0.5)
    assert res.skew["straggler_rank"] is None or res.skew["straggler_rank"] in (0, 1)


def test_rank_from_init_payload_not_process_order(tmp_path):
    path = make_report(tmp_path / "r.sqlite")
    con = sqlite3.connect(path)  # swap the ranks: pid 100 says rank 1
    rows = con.execute(
        "SELECT rowid, binaryData FROM NVTX_EVENTS WHERE textId = "
        "(SELECT id FROM StringIds WHERE value = 'ncclCommInitRank')"
    ).fetchall()
    for rowid, blob in rows:
        comm, n, rank, dev = struct.unpack("<Qiii4x", blob)
        con.execute(
            "UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?",
            (struct.pack("<Qiii4x", comm, n, 1 - rank, dev), rowid),
        )
    con.commit()
    con.close()
    res = api.combine([_extract(path)])
    assert dict(res.collectives.groupby("pid")["rank"].first()) == {100: 1, 200: 0}


def test_no_blobs_names_the_export_flags(tmp_path):
    e = _extract(make_report(tmp_path / "r.sqlite", encoding="none"))
    assert any(
        "--include-blobs=true" in w and "--include-json=true" in w and "EXPORT_PARAM_INCLUDE_BLOBS=false" in w
        for w in e.warnings
    )
    assert "nccl_payload" not in set(e.calls["source"].to_pylist())
    assert e.calls["bytes"].null_count == len(e.calls)


def test_domain_create_outside_window_and_no_init(tmp_path):
    e = _extract(make_report(tmp_path / "r.sqlite", domain_create=False, init=False))
    c = _rows(e)
    r0 = c[c["pid"] == 100].reset_index(drop=True)
    # without ncclCommInitRank the communicator size is unknown: per-rank sizes cannot become S
    assert [None if b is None or b is pd.NA or b != b else int(b) for b in r0["bytes"]] == [
        1 << 20,
        None,
        None,
        1024,
        400,
    ]
    assert len(e.markers) == 0


@pytest.mark.parametrize("redop_enum", [B + 11, B + 14, B + 16, B + 24])
def test_enum_type_ids_shift_between_releases(redop_enum):
    schemas = nccl_payload.load_schemas(
        [(B + 5, 24)],
        [
            (B + 5, 0, 18, "NCCL communicator ID", None),
            (B + 5, 1, 22, "Message size [bytes]", 8),
            (B + 5, 2, redop_enum, "Reduction operation", 16),
        ],
    )
    got = nccl_payload.decode_binary(struct.pack("<QQi4x", 7, 123, 2), schemas, B + 5)
    assert got == {"comm": 7, "msg_bytes": 123, "redop": 2}
    assert nccl_payload.redop_name(got["redop"]) == "max"
    # the layout is found from the blob's size when the schema id is not given
    assert nccl_payload.decode_binary(struct.pack("<QQi4x", 7, 123, 2), schemas) == got


def test_nccl_tests_bytes_rules():
    assert nccl_payload.nccl_tests_bytes("all_gather", 4096, 8) == 32768
    assert nccl_payload.nccl_tests_bytes("reduce_scatter", 4096, 8) == 32768
    assert nccl_payload.nccl_tests_bytes("all_reduce", 4096, 8) == 4096
    assert nccl_payload.nccl_tests_bytes("all_gather", 4096, None) is None
    assert nccl_payload.api_op("ncclAllGather") == "all_gather"
    assert nccl_payload.api_op(None, B + 7) == "reduce_scatter"
    assert nccl_payload.api_op(None, B + 16) == "all_to_all"


@pytest.mark.skipif(not REAL.exists(), reason="shared/real/nsys/nsys2026.2_2xH100_nccl_window.sqlite is absent")
def test_real_export_without_blobs():
    e = _extract(REAL)
    # 66 kernels (33 per GPU); NCCL 2.27 grouped Send/Recv under PyTorch's nccl:all_to_all ranges
    assert len(e.calls) == 66
    msg = [w for w in e.warnings if "without payload values" in w]
    assert msg and "EXPORT_PARAM_INCLUDE_BLOBS=false" in msg[0] and "--include-blobs=true" in msg[0]
    assert "264 NCCL NVTX range(s)" in msg[0]  # 132 ncclSend + 132 ncclRecv
    tables = nsys_reader.table_columns(REAL)
    ev, schemas = nccl_payload.read_events(REAL, tables, [], "real")
    assert ev["name"].value_counts().to_dict() == {
        "ncclSend": 132,
        "ncclRecv": 132,
        "ncclCommCount": 66,
        "ncclGroupStart": 66,
        "ncclGroupEnd": 66,
    }
    # the same counts with plain SQL on the export, and its NCCL kernels (66)
    con = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    try:
        names = dict(
            con.execute(
                """SELECT s.value, count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                WHERE s.value IN ('ncclSend', 'ncclRecv', 'ncclCommCount', 'ncclGroupStart', 'ncclGroupEnd')
                GROUP BY 1"""
            ).fetchall()
        )
        kernels = con.execute(
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value LIKE 'nccl%'"""
        ).fetchone()[0]
    finally:
        con.close()
    assert names == ev["name"].value_counts().to_dict() and kernels == len(e.calls)
    # 2.27 registers the reduction-op enum as schema (1<<24)+16 (it was +11 in 2.19)
    assert dict((f, t) for f, t, _o in schemas[B + 7].entries)["redop"] == B + 16
    units = nccl_payload.build_units(ev, {})
    assert len(units) == 66 and set(units["members"]) == {4}
