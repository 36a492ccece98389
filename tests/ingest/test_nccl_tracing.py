"""nsys's NCCL tracing (``--trace=nccl``): NCCL's NVTX payloads carrying the communicator's hash
and NCCL's sequence number (``commHash``, ``seqNumber``: the names nsys's recipe tables give them)
match one collective across ranks exactly, where the ranks' capture windows differ and matching
by order pairs the wrong calls. Built from the documented names; no real export carries them
(docs/sources.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import nsyscomm
from tests.conftest import real_file
from tests.ingest.test_nccl_payload import DDL

COMM = 0x1D2C3B4A59687706
KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def make_report(path: Path, seq: bool) -> Path:
    """Two processes (ranks 0, 1 by their init payload); rank 0's window starts one all_reduce
    later than rank 1's (it misses seq 0). The n-th all_reduce moves 1 MiB x (seq + 1)."""
    con = sqlite3.connect(path)
    con.executescript(DDL)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[s], s))
        return strings[s]

    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INCLUDE_JSON', 'true')")

    def rng(pid: int, t0: int, t1: int, name: str, payload: dict) -> None:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId, jsonText) "
            "VALUES (?, ?, 59, ?, ?, 1, ?)",
            (t0, t1, (pid << 24) | pid, sid(name), json.dumps(payload)),
        )

    for rank, pid in enumerate((100, 200)):
        con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (pid << 24, pid))
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (10, 75, 'NCCL', ?, 1)",
            ((pid << 24) | pid,),
        )
        rng(pid, 1_000, 50_000, "ncclCommInitRank", {"commHash": COMM, "No. of ranks": 2, "Rank": rank})
        corr = 0
        for s in range(1 if rank == 0 else 0, 4):
            t = 100_000 * (s + 1) + 7_000 * rank
            payload = {"commHash": COMM, "Message size [bytes]": (s + 1) << 20}
            if seq:
                payload["seqNumber"] = s
            rng(pid, t, t + 5_000, "ncclAllReduce", payload)
            corr += 1
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                (t + 1_000, t + 3_000, (pid << 24) | pid, corr, sid("cudaLaunchKernel")),
            )
            k0 = 100_000 * (s + 1) + 20_000
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, NULL, 7, ?, ?, ?, ?, NULL)",
                (k0, k0 + 30_000, rank, corr, pid << 24, sid(KERNEL), sid(KERNEL)),
            )
    con.commit()
    con.close()
    return path


def _pairs(res) -> set[tuple[int, ...]]:
    return {tuple(sorted(g["bytes"].tolist())) for _, g in res.collectives.groupby("logical_id")}


def test_seq_number_matches_collectives_exactly(tmp_path):
    res = nsyscomm.load(make_report(tmp_path / "r.sqlite", seq=True), cache=False)
    mib = 1 << 20
    assert _pairs(res) == {(mib,), (2 * mib, 2 * mib), (3 * mib, 3 * mib), (4 * mib, 4 * mib)}
    assert set(res.collectives["group"]) == {f"0x{COMM:016x}"}
    assert not any("call order" in w for w in res.warnings)


def test_without_seq_number_calls_match_by_order(tmp_path):
    res = nsyscomm.load(make_report(tmp_path / "r.sqlite", seq=False), cache=False)
    assert (1 << 20, 2 << 20) in _pairs(res)  # today's rule: the n-th with the n-th


@pytest.mark.parametrize(
    "name", ["nsys2025.3_1xH100_nccl2.28_run_light.sqlite", "nsys2026.2_2xH100_nccl_window.sqlite"]
)
def test_real_exports_carry_no_sequence_number(name):
    """The real exports with NCCL's ranges register the classic entries only (no seqNumber) and
    hold no payload values: their calls keep today's matching."""
    path = real_file(f"nsys/{name}")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = {r[0].lower() for r in con.execute("SELECT name FROM NVTX_PAYLOAD_SCHEMA_ENTRIES")}
    con.close()
    assert "seqnumber" not in names and "nccl communicator id" in names
    c = nsyscomm.load(path, cache=False).collectives
    assert len(c) > 0
