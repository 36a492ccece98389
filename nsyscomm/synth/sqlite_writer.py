"""Writing a Report as an nsys SQLite export: the CREATE statements, registered strings, shuffled
rows, and mangled kernel names as nsys stores them."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

from nsyscomm.synth.report import (
    CUPTI_TABLES,
    GENERATOR_VERSION,
    SESSION_SYSTEM_CLOCK_NS,
    SESSION_UTC_EPOCH_NS,
    TABLES,
    Report,
)

# ---------------------------------------------------------------------------------------
# Writing SQLite
# ---------------------------------------------------------------------------------------


def demangled(name: str) -> str:
    if name.startswith("nccl"):
        return f"{name}(ncclDevKernelArgsStorage<4096ul>)"
    return f"void {name}<float, 128, 4>(int, T1, T2)"


def mangled(name: str) -> str:
    return f"_Z{len(name)}{name}v"


def kernel_shape(name: str) -> dict[str, int]:
    if name.startswith("nccl"):
        return dict(
            launchType=1,
            cacheConfig=1,
            registersPerThread=96,
            gridX=16,
            gridY=1,
            gridZ=1,
            blockX=640,
            blockY=1,
            blockZ=1,
            staticSharedMemory=21568,
            dynamicSharedMemory=82240,
            localMemoryPerThread=0,
            localMemoryTotal=787218432,
            sharedMemoryExecuted=135168,
            sharedMemoryLimitConfig=1,
            clusterX=4,
            clusterY=1,
            clusterZ=1,
            clusterSchedulingPolicy=1,
            maxPotentialClusterSize=8,
            maxActiveClusters=30,
        )
    return dict(
        launchType=0,
        cacheConfig=1,
        registersPerThread=128,
        gridX=1024,
        gridY=2,
        gridZ=1,
        blockX=256,
        blockY=1,
        blockZ=1,
        staticSharedMemory=0,
        dynamicSharedMemory=49152,
        localMemoryPerThread=0,
        localMemoryTotal=250871808,
        sharedMemoryExecuted=65536,
        sharedMemoryLimitConfig=0,
        clusterX=0,
        clusterY=0,
        clusterZ=0,
        clusterSchedulingPolicy=1,
        maxPotentialClusterSize=0,
        maxActiveClusters=0,
    )


def cols(table: str) -> list[str]:
    return [c.split()[0] for c in TABLES[table]]


def create_statement(table: str) -> str:
    body = ",\n    ".join(TABLES[table])
    return f"CREATE TABLE {table} (\n    {body}\n)"


class _Strings:
    """StringIds as nsys numbers them: from 1, in the order the rows first name each string."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def sid(self, s: str) -> int:
        if s not in self.ids:
            self.ids[s] = len(self.ids) + 1
        return self.ids[s]


def _row(columns: list[str], values: dict[str, Any]) -> tuple[Any, ...]:
    """A table row in column order; the columns not given are NULL."""
    row: dict[str, Any] = dict.fromkeys(columns)
    row.update(values)
    return tuple(row[c] for c in columns)


def _nvtx_rows(rep: Report, strings: _Strings) -> list[tuple[Any, ...]]:
    nvtx_cols = cols("NVTX_EVENTS")
    nv = []
    for e in rep.nvtx:
        values = dict(
            start=e["start"],
            end=e["end"],
            eventType=e["eventType"],
            text=e["text"],
            globalTid=e["globalTid"],
            domainId=e["domainId"],
            uint64Value=e["uint64Value"],
        )
        if e["registered"] is not None:
            values["textId"] = strings.sid(e["registered"])
        nv.append(_row(nvtx_cols, values))
    return nv


def _cupti_tables(rep: Report, strings: _Strings) -> dict[str, list[tuple[Any, ...]]]:
    """The runtime calls, kernels and memory copies (a report with CUDA)."""
    rt_cols = cols("CUPTI_ACTIVITY_KIND_RUNTIME")
    rt = [
        _row(
            rt_cols,
            dict(
                start=r["start"],
                end=r["end"],
                eventClass=r["eventClass"],
                globalTid=r["globalTid"],
                correlationId=r["correlationId"],
                nameId=strings.sid(r["name"]),
                returnValue=0,
            ),
        )
        for r in rep.runtime
    ]
    k_cols = cols("CUPTI_ACTIVITY_KIND_KERNEL")
    ks = []
    for k in rep.kernels:
        values = dict(
            start=k["start"],
            end=k["end"],
            deviceId=k["deviceId"],
            contextId=k["contextId"],
            greenContextId=k["greenContextId"],
            streamId=k["streamId"],
            correlationId=k["correlationId"],
            globalPid=k["globalPid"],
            demangledName=strings.sid(demangled(k["name"])),
            shortName=strings.sid(k["name"]),
            mangledName=strings.sid(mangled(k["name"])),
            gridId=k["gridId"],
            tensorSizeMinusOneElements="[]",
        )
        values.update(kernel_shape(k["name"]))
        ks.append(_row(k_cols, values))
    m_cols = cols("CUPTI_ACTIVITY_KIND_MEMCPY")
    return {
        "CUPTI_ACTIVITY_KIND_RUNTIME": rt,
        "CUPTI_ACTIVITY_KIND_KERNEL": ks,
        "CUPTI_ACTIVITY_KIND_MEMCPY": [_row(m_cols, m) for m in rep.memcpys],
    }


def _session_tables(rep: Report) -> dict[str, list[tuple[Any, ...]]]:
    """The session's start time and the export's metadata, as nsys 2026.2 writes them."""
    utc = SESSION_UTC_EPOCH_NS + rep.session_offset_ns
    base = rep.name.rsplit(".", 1)[0]
    return {
        "TARGET_INFO_SESSION_START_TIME": [
            (utc, "2026-05-28T20:26:40", "2026-05-28T20:26:40", SESSION_SYSTEM_CLOCK_NS + rep.session_offset_ns)
        ],
        "META_DATA_EXPORT": [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", "2026.2.1.210"),
            ("EXPORT_PRODUCT_DATE", "2026.2"),
            ("EXPORT_SCHEMA_VERSION", "3.25.0"),
            ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
            ("EXPORT_SCHEMA_VERSION_MINOR", "25"),
            ("EXPORT_SCHEMA_VERSION_MICRO", "0"),
            ("EXPORT_PLATFORM", "linux-desktop"),
            ("EXPORT_ARCH", "x64"),
            ("EXPORT_HOST", "synthetic"),
            ("EXPORT_USER", ""),
            ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"),
            ("EXPORT_PARAM_INPUT_FILE", f"{base}.nsys-rep"),
            ("EXPORT_PARAM_OUTPUT_FILE", rep.name),
            ("EXPORT_PARAM_USE_SHUFFLE", "true"),
            ("EXPORT_PARAM_INCLUDE_JSON", "false"),
            ("EXPORT_PARAM_INCLUDE_BLOBS", "false"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
            ("DERIVED_BY", f"nsyscomm.synth v{GENERATOR_VERSION} (synthetic, no real capture)"),
        ],
    }


def _tables(rep: Report) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows; string ids are handed out in the order nsys's tables name them."""
    strings = _Strings()
    tables: dict[str, list[tuple[Any, ...]]] = {}
    tables["ThreadNames"] = [
        (strings.sid(tname), 20, p.gtid(tid)) for p in rep.procs for tid, tname in sorted(p.threads.items())
    ]
    tables["PROCESSES"] = [(p.gpid, p.pid, p.name) for p in rep.procs]
    tables["NVTX_EVENTS"] = _nvtx_rows(rep, strings)
    if rep.cuda:
        tables.update(_cupti_tables(rep, strings))
    else:
        assert not rep.runtime and not rep.kernels and not rep.memcpys
    tables.update(_session_tables(rep))
    # StringIds last: every id is known now.
    tables["StringIds"] = [(i, s) for s, i in strings.ids.items()]
    return tables


def write_sqlite(rep: Report, path: Path, seed: int) -> None:
    """Write ``rep`` to ``path`` (overwriting); rows of every table in a seeded shuffled order."""
    path = Path(path)
    if path.exists():
        path.unlink()
    rng = random.Random(f"write:{seed}:{rep.name}")
    tables = _tables(rep)
    con = sqlite3.connect(str(path))
    try:
        order = [
            "StringIds",
            "ThreadNames",
            "PROCESSES",
            "TARGET_INFO_SESSION_START_TIME",
            "META_DATA_EXPORT",
            "NVTX_EVENTS",
        ] + (list(CUPTI_TABLES) if rep.cuda else [])
        if rep.cuda and rep.memcpys:
            order.append("CUPTI_ACTIVITY_KIND_MEMCPY")
        for t in order:
            con.execute(create_statement(t))
            rows = list(tables[t])
            if t != "META_DATA_EXPORT":
                rng.shuffle(rows)
            ph = ",".join("?" * len(TABLES[t]))
            con.executemany(f"INSERT INTO {t} VALUES ({ph})", rows)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
