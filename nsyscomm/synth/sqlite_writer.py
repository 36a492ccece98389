"""Writing a Report as an nsys SQLite export: the CREATE statements, registered strings, shuffled
rows, and mangled kernel names as nsys stores them."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

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


def kernel_shape(name: str) -> dict:
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


def write_sqlite(rep: Report, path: Path, seed: int) -> None:
    """Write ``rep`` to ``path`` (overwriting); rows of every table in a seeded shuffled order."""
    path = Path(path)
    if path.exists():
        path.unlink()
    rng = random.Random(f"write:{seed}:{rep.name}")
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    tables: dict[str, list[tuple]] = {}

    threads = []
    for p in rep.procs:
        for tid, tname in sorted(p.threads.items()):
            threads.append((sid(tname), 20, p.gtid(tid)))
    tables["ThreadNames"] = threads
    tables["PROCESSES"] = [(p.gpid, p.pid, p.name) for p in rep.procs]

    nvtx_cols = cols("NVTX_EVENTS")
    nv = []
    for e in rep.nvtx:
        row = dict.fromkeys(nvtx_cols)
        row.update(
            start=e["start"],
            end=e["end"],
            eventType=e["eventType"],
            text=e["text"],
            globalTid=e["globalTid"],
            domainId=e["domainId"],
            uint64Value=e["uint64Value"],
        )
        if e["registered"] is not None:
            row["textId"] = sid(e["registered"])
        nv.append(tuple(row[c] for c in nvtx_cols))
    tables["NVTX_EVENTS"] = nv

    if rep.cuda:
        rt_cols = cols("CUPTI_ACTIVITY_KIND_RUNTIME")
        rt = []
        for r in rep.runtime:
            row = dict.fromkeys(rt_cols)
            row.update(
                start=r["start"],
                end=r["end"],
                eventClass=r["eventClass"],
                globalTid=r["globalTid"],
                correlationId=r["correlationId"],
                nameId=sid(r["name"]),
                returnValue=0,
            )
            rt.append(tuple(row[c] for c in rt_cols))
        tables["CUPTI_ACTIVITY_KIND_RUNTIME"] = rt
        k_cols = cols("CUPTI_ACTIVITY_KIND_KERNEL")
        ks = []
        for k in rep.kernels:
            row = dict.fromkeys(k_cols)
            row.update(
                start=k["start"],
                end=k["end"],
                deviceId=k["deviceId"],
                contextId=k["contextId"],
                greenContextId=k["greenContextId"],
                streamId=k["streamId"],
                correlationId=k["correlationId"],
                globalPid=k["globalPid"],
                demangledName=sid(demangled(k["name"])),
                shortName=sid(k["name"]),
                mangledName=sid(mangled(k["name"])),
                gridId=k["gridId"],
                tensorSizeMinusOneElements="[]",
            )
            row.update(kernel_shape(k["name"]))
            ks.append(tuple(row[c] for c in k_cols))
        tables["CUPTI_ACTIVITY_KIND_KERNEL"] = ks
        m_cols = cols("CUPTI_ACTIVITY_KIND_MEMCPY")
        tables["CUPTI_ACTIVITY_KIND_MEMCPY"] = [
            tuple({**dict.fromkeys(m_cols), **m}[c] for c in m_cols) for m in rep.memcpys
        ]
    else:
        assert not rep.runtime and not rep.kernels and not rep.memcpys

    utc = SESSION_UTC_EPOCH_NS + rep.session_offset_ns
    tables["TARGET_INFO_SESSION_START_TIME"] = [
        (utc, "2026-05-28T20:26:40", "2026-05-28T20:26:40", SESSION_SYSTEM_CLOCK_NS + rep.session_offset_ns)
    ]
    base = rep.name.rsplit(".", 1)[0]
    tables["META_DATA_EXPORT"] = [
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
    ]
    # StringIds last: every id is known now.
    tables["StringIds"] = [(i, s) for s, i in strings.items()]

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
