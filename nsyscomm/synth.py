"""Deterministic generator of synthetic nsys SQLite reports with exact ground truth.

The reports imitate nsys 2026.2 exports (schema 3.25): the tables and columns are those of
the real CREATE statements; names are registered in ``StringIds``; ``globalTid`` carries a
host id in the top bits, the pid in bits 24..47 and the tid in bits 0..23; correlation ids
restart at 1 in every process; rows are inserted in a shuffled (seeded) order.

Next to each report ``<name>.truth.json`` holds what the ingest and the analyses must find.
The truth is computed here, in plain Python, from the generated events (never by running
nsyscomm's SQL), following the rules below (the spec the ingest implements):

* one row per collective call per rank. A wrapper range (``nsyscomm:<op>|...``) gives one row
  with the message's fields; its kernels are the NCCL kernels whose launch call lies inside
  the range on the same thread. Without a wrapper, one row per NCCL kernel: op from the
  kernel name (SendRecv -> the enclosing PyTorch ``nccl:<op>`` range's op, else ``send``),
  source ``torch_range`` when such a range on the launching thread contains the launch, else
  ``kernel_name``; bytes/group NULL; seq = order of the rank's rows of that op by gpu_start;
  group_size = number of ranks sharing (op, seq).
* rank from the ``nsyscomm.rank`` marker, else process order (report file name, pid) over the
  processes that have collectives.
* logical collective = rows with the same (group, op, seq); latency = min duration.
* summary / by_caller / ranks / skew / exposed_ns as in docs/architecture.md (see ``compute_truth``).

Use ``python -m nsyscomm.synth OUTDIR`` to regenerate the samples.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

import numpy

from nsyscomm import nvtx_format
from nsyscomm.busbw import busbw_factor

TRUTH_SCHEMA = 1
GENERATOR_VERSION = 1

# Column lists copied from the CREATE statements of nsys 2026.2.1 (export schema 3.25.0).
TABLES = {
    "StringIds": (
        "id INTEGER NOT NULL PRIMARY KEY",
        "value TEXT NOT NULL",
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL",
        "end INTEGER",
        "eventType INTEGER NOT NULL",
        "rangeId INTEGER",
        "category INTEGER",
        "color INTEGER",
        "text TEXT",
        "globalTid INTEGER",
        "endGlobalTid INTEGER",
        "textId INTEGER",
        "domainId INTEGER",
        "uint64Value INTEGER",
        "int64Value INTEGER",
        "doubleValue REAL",
        "uint32Value INTEGER",
        "int32Value INTEGER",
        "floatValue REAL",
        "jsonTextId INTEGER",
        "jsonText TEXT",
        "binaryData TEXT",
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL",
        "end INTEGER NOT NULL",
        "deviceId INTEGER NOT NULL",
        "contextId INTEGER NOT NULL",
        "greenContextId INTEGER",
        "streamId INTEGER NOT NULL",
        "correlationId INTEGER",
        "globalPid INTEGER",
        "demangledName INTEGER NOT NULL",
        "shortName INTEGER NOT NULL",
        "mangledName INTEGER",
        "launchType INTEGER",
        "cacheConfig INTEGER",
        "registersPerThread INTEGER NOT NULL",
        "gridX INTEGER NOT NULL",
        "gridY INTEGER NOT NULL",
        "gridZ INTEGER NOT NULL",
        "blockX INTEGER NOT NULL",
        "blockY INTEGER NOT NULL",
        "blockZ INTEGER NOT NULL",
        "staticSharedMemory INTEGER NOT NULL",
        "dynamicSharedMemory INTEGER NOT NULL",
        "localMemoryPerThread INTEGER NOT NULL",
        "localMemoryTotal INTEGER NOT NULL",
        "gridId INTEGER NOT NULL",
        "sharedMemoryExecuted INTEGER",
        "graphNodeId INTEGER",
        "sharedMemoryLimitConfig INTEGER",
        "qmdBulkReleaseDone INTEGER",
        "qmdPreexitDone INTEGER",
        "qmdLastCtaDone INTEGER",
        "graphId INTEGER",
        "clusterX INTEGER",
        "clusterY INTEGER",
        "clusterZ INTEGER",
        "clusterSchedulingPolicy INTEGER",
        "maxPotentialClusterSize INTEGER",
        "maxActiveClusters INTEGER",
        "sharedMemoryRequestedPercentage INTEGER",
        "tensorSizeMinusOneElements TEXT NOT NULL",
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL",
        "end INTEGER NOT NULL",
        "eventClass INTEGER NOT NULL",
        "globalTid INTEGER",
        "correlationId INTEGER",
        "nameId INTEGER NOT NULL",
        "returnValue INTEGER NOT NULL",
        "callchainId INTEGER",
    ),
    "PROCESSES": (
        "globalPid INTEGER",
        "pid INTEGER",
        "name TEXT",
    ),
    "ThreadNames": (
        "nameId INTEGER NOT NULL",
        "priority INTEGER",
        "globalTid INTEGER",
    ),
    "TARGET_INFO_SESSION_START_TIME": (
        "utcEpochNs INTEGER",
        "utcTime TEXT",
        "localTime TEXT",
        "systemClockNs INTEGER",
    ),
    "META_DATA_EXPORT": (
        "name TEXT NOT NULL",
        "value TEXT",
    ),
}

CUPTI_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")

NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTX_MARK = 34
NVTX_DOMAIN_CREATE = 75

# Launch APIs as nsys 2026.2 names them (runtime class 0, driver class 1).
LAUNCH_RUNTIME = "cudaLaunchKernel_v7000"
LAUNCH_DRIVER = "cuLaunchKernelEx"
_EVENT_CLASS = {
    LAUNCH_RUNTIME: 0,
    LAUNCH_DRIVER: 1,
    "cudaStreamSynchronize_v3020": 0,
    "cudaSetDevice_v3020": 0,
    "cudaStreamIsCapturing_v10000": 0,
    "cudaEventRecord_v3020": 0,
}

NCCL_DOMAIN_ID = 1  # NCCL's NVTX domain id (as in the real 2xH100 file)
HOST_ID = 1  # top bits of globalTid (real files: 0x1000000000000 + ...)

# systemClock at the session start and its UTC; all samples share one clock.
SESSION_SYSTEM_CLOCK_NS = 19_000_000_000
SESSION_UTC_EPOCH_NS = 1_780_000_000_000_000_000
T0 = 20_000_000_000


def global_pid(pid: int, host: int = HOST_ID) -> int:
    return (host << 48) | (pid << 24)


def global_tid(pid: int, tid: int, host: int = HOST_ID) -> int:
    return global_pid(pid, host) | tid


def pid_of(gtid: int) -> int:
    return (gtid >> 24) & 0xFFFFFF


def tid_of(gtid: int) -> int:
    return gtid & 0xFFFFFF


# ---------------------------------------------------------------------------------------
# The in-memory report
# ---------------------------------------------------------------------------------------


class Proc:
    def __init__(self, pid: int, name: str, threads: dict[int, str], host: int = HOST_ID):
        self.pid = pid
        self.name = name
        self.host = host
        self.threads = dict(threads)
        self._corr = 0
        self._grid = 0
        self._op_id = 1000 + pid * 7

    @property
    def gpid(self) -> int:
        return global_pid(self.pid, self.host)

    def gtid(self, tid: int | None = None) -> int:
        return global_tid(self.pid, self.pid if tid is None else tid, self.host)

    def next_corr(self) -> int:
        self._corr += 1  # restarts at 1 in every process, as in real exports
        return self._corr

    def next_grid(self) -> int:
        self._grid += 1
        return self._grid

    def next_op_id(self) -> int:
        self._op_id += 1
        return self._op_id


class Report:
    def __init__(self, name: str, *, cuda: bool = True, session_offset_ns: int = 0):
        self.name = name
        self.cuda = cuda
        self.session_offset_ns = session_offset_ns
        self.procs: list[Proc] = []
        self.nvtx: list[dict] = []
        self.runtime: list[dict] = []
        self.kernels: list[dict] = []

    def process(self, pid, name, threads=None, host=HOST_ID) -> Proc:
        p = Proc(pid, name, threads or {pid: name}, host)
        self.procs.append(p)
        return p

    # NVTX ----------------------------------------------------------------------------
    def range(
        self, proc: Proc, tid, start, end, *, text=None, registered=None, domain=0, event_type=NVTX_PUSHPOP, uint64=None
    ):
        assert (text is None) != (registered is None)
        assert end is None or end >= start
        row = {
            "start": start,
            "end": end,
            "eventType": event_type,
            "text": text,
            "registered": registered,
            "globalTid": proc.gtid(tid),
            "domainId": domain,
            "uint64Value": uint64,
        }
        self.nvtx.append(row)
        return row

    def mark(self, proc, tid, t, *, text=None, registered=None, domain=0):
        return self.range(proc, tid, t, None, text=text, registered=registered, domain=domain, event_type=NVTX_MARK)

    def domain_create(self, proc, tid, t, name, domain_id):
        return self.range(proc, tid, t, None, text=name, domain=domain_id, event_type=NVTX_DOMAIN_CREATE)

    # CUDA ----------------------------------------------------------------------------
    def api_call(self, proc: Proc, tid, start, end, name, corr=None):
        corr = proc.next_corr() if corr is None else corr
        row = {
            "start": start,
            "end": end,
            "eventClass": _EVENT_CLASS.get(name, 0),
            "globalTid": proc.gtid(tid),
            "correlationId": corr,
            "name": name,
        }
        self.runtime.append(row)
        return row

    def kernel(self, proc: Proc, corr, *, device, stream, start, end, name):
        nccl = name.startswith("nccl")
        row = {
            "start": start,
            "end": end,
            "deviceId": device,
            "contextId": device + 1,
            "greenContextId": 0,
            "streamId": stream,
            "correlationId": corr,
            "globalPid": proc.gpid,
            "name": name,
            "gridId": proc.next_grid(),
            "nccl": nccl,
        }
        self.kernels.append(row)
        return row


# ---------------------------------------------------------------------------------------
# Writing SQLite
# ---------------------------------------------------------------------------------------


def _demangled(name: str) -> str:
    if name.startswith("nccl"):
        return f"{name}(ncclDevKernelArgsStorage<4096ul>)"
    return f"void {name}<float, 128, 4>(int, T1, T2)"


def _mangled(name: str) -> str:
    return f"_Z{len(name)}{name}v"


def _kernel_shape(name: str) -> dict:
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


def _cols(table):
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

    nvtx_cols = _cols("NVTX_EVENTS")
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
        rt_cols = _cols("CUPTI_ACTIVITY_KIND_RUNTIME")
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
        k_cols = _cols("CUPTI_ACTIVITY_KIND_KERNEL")
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
                demangledName=sid(_demangled(k["name"])),
                shortName=sid(k["name"]),
                mangledName=sid(_mangled(k["name"])),
                gridId=k["gridId"],
                tensorSizeMinusOneElements="[]",
            )
            row.update(_kernel_shape(k["name"]))
            ks.append(tuple(row[c] for c in k_cols))
        tables["CUPTI_ACTIVITY_KIND_KERNEL"] = ks
    else:
        assert not rep.runtime and not rep.kernels

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


# ---------------------------------------------------------------------------------------
# A small per-rank simulator for GPU jobs
# ---------------------------------------------------------------------------------------


class RankSim:
    """CPU threads issue launches; GPU streams run kernels in order; collectives are coupled
    across ranks by ``finish_collective`` (a collective ends together on all its ranks)."""

    def __init__(self, rep: Report, proc: Proc, rng: random.Random, *, rank: int, device: int, start: int):
        self.rep, self.proc, self.rng = rep, proc, rng
        self.rank, self.device = rank, device
        self.cpu = defaultdict(lambda: start)
        self.cpu[proc.pid] = start
        self.stream_free = defaultdict(int)
        self.events: dict[str, int] = {}
        self.launch_cpu: dict[str, int] = {}  # CPU time a recorded kernel's launch returned
        self.seq = defaultdict(int)  # wrapper seq per group name

    @property
    def main(self):
        return self.proc.pid

    def advance(self, tid, ns):
        self.cpu[tid] += ns

    def compute(self, tid, name, stream, dur, *, wait=(), record=None, torch_range=None):
        r = self.rng
        t = self.cpu[tid]
        if torch_range:
            op_id = self.proc.next_op_id()
            rs, t = t, t + r.randint(2000, 6000)
        ldur = r.randint(3500, 7000)
        call = self.rep.api_call(self.proc, tid, t, t + ldur, LAUNCH_RUNTIME)
        start = max(t + ldur + r.randint(1500, 4000), self.stream_free[stream], *[self.events[e] for e in wait])
        end = start + dur + r.randint(0, dur // 20 + 1)
        self.rep.kernel(
            self.proc, call["correlationId"], device=self.device, stream=stream, start=start, end=end, name=name
        )
        self.stream_free[stream] = end
        if record:
            self.events[record] = end
            self.launch_cpu[record] = t + ldur
        t_end = t + ldur
        if torch_range:
            t_end += r.randint(1000, 3000)
            self.rep.range(self.proc, tid, rs, t_end, text=f"{torch_range}, op_id = {op_id}")
        self.cpu[tid] = t_end + r.randint(8000, 25000)
        return end

    def sync(self, tid):
        """cudaStreamSynchronize on all streams: the CPU waits for the GPU."""
        t = self.cpu[tid]
        gpu = max(self.stream_free.values(), default=t)
        end = max(t, gpu) + self.rng.randint(3000, 6000)
        self.rep.api_call(self.proc, tid, t, end, "cudaStreamSynchronize_v3020")
        self.cpu[tid] = end + self.rng.randint(2000, 4000)
        return end

    def _kernel_pending(self, corr, name, stream, ready, wait):
        start = max(ready + self.rng.randint(1500, 4000), self.stream_free[stream], *[self.events[e] for e in wait])
        k = self.rep.kernel(self.proc, corr, device=self.device, stream=stream, start=start, end=start, name=name)
        return {"sim": self, "kernel": k, "stream": stream}

    def _late_start(self, tid, wait, late_ns):
        t = self.cpu[tid]
        if late_ns:
            t = max([t] + [self.events[e] for e in wait]) + late_ns
        return t

    def wrapper_collective(
        self,
        tid,
        op,
        *,
        api,
        nbytes,
        dtype,
        itemsize,
        pg,
        gsize,
        granks=(),
        step=None,
        caller,
        kernel,
        stream,
        wait=(),
        late_ns=0,
        numel=None,
    ):
        """A wrapper range enclosing a cuLaunchKernelEx of one NCCL kernel (end set later)."""
        r = self.rng
        rs = self._late_start(tid, wait, late_ns)
        seq = self.seq[str(pg)]
        self.seq[str(pg)] += 1
        if numel is None:
            numel = nbytes // itemsize if itemsize else None
        msg = nvtx_format.format_collective(
            op,
            api=api,
            bytes=nbytes,
            dtype=dtype,
            numel=numel,
            pg=pg,
            gsize=gsize,
            granks=granks,
            seq=seq,
            step=step,
            caller=caller,
        )
        ls = rs + r.randint(3000, 9000)
        if r.random() < 0.5:  # a non-launch runtime call inside the range, as torch does
            self.rep.api_call(self.proc, tid, ls - 2500, ls - 1500, "cudaStreamIsCapturing_v10000")
        le = ls + r.randint(4000, 9000)
        re_ = le + r.randint(2000, 6000)
        call = self.rep.api_call(self.proc, tid, ls, le, LAUNCH_DRIVER)
        self.rep.range(self.proc, tid, rs, re_, registered=msg, domain=1)
        self.cpu[tid] = re_ + r.randint(5000, 15000)
        return self._kernel_pending(call["correlationId"], kernel, stream, le, wait)

    def torch_collective(
        self,
        tid,
        op,
        *,
        kernel,
        stream,
        wait=(),
        late_ns=0,
        launch=LAUNCH_RUNTIME,
        op_id_suffix=False,
        drop_launch=False,
        nccl_p2p_peers=None,
    ):
        """PyTorch's ranges (c10d::*, record_param_comms, nccl:<op>) enclosing the launch.
        With ``nccl_p2p_peers`` NCCL's own ranges (domain 1, registered strings) are nested
        inside and the launch lies inside ncclGroupEnd, not inside ncclSend/ncclRecv."""
        r = self.rng
        p = self.proc
        t0 = self._late_start(tid, wait, late_ns)
        c10d = {"all_reduce": "c10d::allreduce_", "all_to_all": "c10d::alltoall_base_"}[op]
        id1, id2, id3 = p.next_op_id(), p.next_op_id(), p.next_op_id()
        t1 = t0 + r.randint(5000, 12000)
        t2 = t1 + r.randint(4000, 8000)
        t = t2 + r.randint(3000, 9000)
        if nccl_p2p_peers:
            s = t
            self.rep.range(p, tid, s, s + 1000, registered="ncclGroupStart", domain=NCCL_DOMAIN_ID)
            t = s + 1500
            for _peer in range(nccl_p2p_peers):
                for what in ("ncclSend", "ncclRecv"):
                    d = r.randint(300, 4000)
                    self.rep.range(p, tid, t, t + d, registered=what, domain=NCCL_DOMAIN_ID)
                    t += d + r.randint(200, 600)
            ge = t
            ls = ge + r.randint(3000, 8000)
        else:
            ls = t
        le = ls + r.randint(4000, 10000)
        corr = p.next_corr()
        if not drop_launch:
            self.rep.api_call(p, tid, ls, le, launch, corr=corr)
        t = le + r.randint(2000, 5000)
        if nccl_p2p_peers:
            self.rep.range(p, tid, ge, t, registered="ncclGroupEnd", domain=NCCL_DOMAIN_ID)
            t += r.randint(1000, 3000)
        name = f"nccl:{op}, op_id = {id3}" if op_id_suffix else f"nccl:{op}"
        self.rep.range(p, tid, t2, t, text=name)
        t += r.randint(3000, 8000)
        self.rep.range(p, tid, t1, t, text=f"record_param_comms, op_id = {id2}")
        t += r.randint(2000, 5000)
        self.rep.range(p, tid, t0, t, text=f"{c10d}, op_id = {id1}")
        self.cpu[tid] = t + r.randint(5000, 15000)
        return self._kernel_pending(corr, kernel, stream, le, wait)


def finish_collective(pending: list[dict], xfer_ns: int, rng: random.Random, record=None) -> int:
    """All ranks' kernels end together: at the last start plus the transfer (+ < 1 us jitter)."""
    last = max(p["kernel"]["start"] for p in pending)
    for p in pending:
        k = p["kernel"]
        k["end"] = last + xfer_ns + rng.randint(0, 900)
        p["sim"].stream_free[p["stream"]] = k["end"]
        if record:
            p["sim"].events[record] = k["end"]
    return last


def _xfer(nbytes: int, gbps: float, base_ns: int = 12000) -> int:
    return base_ns + int(nbytes / gbps)


def _add_rank_marker(rep, sim: RankSim, *, rank, local_rank, world, host):
    """torch.cuda.set_device, then the nsyscomm domain's creation and the rank marker range.
    The domain-create row (end NULL) is never a process's first or last event, so the elapsed
    time does not depend on whether an ingest counts it."""
    t = sim.cpu[sim.main]
    rep.api_call(sim.proc, sim.main, t, t + 8000, "cudaSetDevice_v3020")
    rep.domain_create(sim.proc, sim.main, t + 20000, nvtx_format.DOMAIN, 1)
    msg = nvtx_format.format_rank_marker(rank, local_rank, world, host)
    rep.range(sim.proc, sim.main, t + 23000, t + 24500, registered=msg, domain=1)
    sim.cpu[sim.main] = t + 40000


# ---------------------------------------------------------------------------------------
# Sample 1: DDP, 4 ranks, rank 2 late
# ---------------------------------------------------------------------------------------

DDP_BUCKETS = (26214400, 26214400, 10813440)


def gen_ddp_4rank(seed: int = 1) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_ddp_4rank.sqlite")
    rep.process(3990, "nsys-launcher", {3990: "nsys-launcher", 3991: "nsys-launcher"})
    pids = [4242, 4240, 4245, 4239]  # rank order != pid order: ranks come from the markers
    sims = []
    for rank, pid in enumerate(pids):
        proc = rep.process(pid, "python3", {pid: "python3", pid + 3: "pt_autograd_0", pid + 5: "pt_nccl_watchdg"})
        sim = RankSim(rep, proc, rng, rank=rank, device=rank, start=T0 + rng.randint(0, 300_000))
        _add_rank_marker(rep, sim, rank=rank, local_rank=rank, world=4, host="node-a")
        sims.append(sim)
    # broadcast of the initial parameters (nobody deliberately late)
    pend = [
        s.wrapper_collective(
            s.main,
            "broadcast",
            api="broadcast",
            nbytes=1048576,
            dtype="float32",
            itemsize=4,
            pg=0,
            gsize=4,
            caller="train.py:40 main",
            kernel="ncclDevKernel_Broadcast_RING_LL",
            stream=13,
        )
        for s in sims
    ]
    finish_collective(pend, _xfer(1048576, 40.0), rng)
    for s in sims:
        s.sync(s.main)
    on_time = {(1, 2), (3, 0), (4, 1)}  # rank 2 is late on all other all-reduces
    late_rank = 2
    for step in range(5):
        for s in sims:
            s.advance(s.main, rng.randint(50_000, 150_000))
            s.step_start = s.cpu[s.main]
            # forward on the main thread, inside a torch-like range
            fs = s.cpu[s.main]
            s.advance(s.main, 3000)
            for k in range(4):
                if k % 2 == 0:
                    s.compute(s.main, "ampere_sgemm_128x64_nn", 7, 380_000)
                else:
                    s.compute(s.main, "vectorized_elementwise_kernel", 7, 45_000)
            rep.range(s.proc, s.main, fs, s.cpu[s.main], text="DistributedDataParallel.forward")
            s.advance(s.main, 5000)
            # backward on the autograd thread; grads of bucket b ready after kernels 1, 3, 5
            at = s.proc.pid + 3
            s.cpu[at] = s.cpu[s.main] + 10_000
            for k in range(6):
                name = "ampere_sgemm_128x64_nn" if k % 2 == 0 else "vectorized_elementwise_kernel"
                s.compute(at, name, 7, 420_000 if k % 2 == 0 else 160_000, record=f"grad{k}")
        for b, nbytes in enumerate(DDP_BUCKETS):
            pend = []
            for s in sims:
                # DDP's hook fires on the CPU once the bucket's last gradient kernel was launched
                s.cpu[s.main] = max(s.cpu[s.main], s.launch_cpu[f"grad{2 * b + 1}"] + rng.randint(15_000, 40_000))
                late = rng.randint(250_000, 900_000) if (s.rank == late_rank and (step, b) not in on_time) else 0
                pend.append(
                    s.wrapper_collective(
                        s.main,
                        "all_reduce",
                        api="DDP bucket",
                        nbytes=nbytes,
                        dtype="float32",
                        itemsize=4,
                        pg=0,
                        gsize=4,
                        step=step,
                        caller="train.py:88 train_step",
                        kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                        stream=13,
                        wait=(f"grad{2 * b + 1}",),
                        late_ns=late,
                    )
                )
            finish_collective(pend, _xfer(nbytes, 60.0), rng, record=f"ar{b}")
        for s in sims:
            s.cpu[s.main] = max(s.cpu[s.main], s.cpu[s.proc.pid + 3]) + 5000
            for _ in range(3):
                s.compute(s.main, "vectorized_elementwise_kernel", 7, 30_000, wait=("ar2",))
            end = s.sync(s.main)
            rep.range(
                s.proc, s.main, s.step_start, end + 1000, registered=nvtx_format.format_step_marker(step), domain=1
            )
            s.cpu[s.main] = max(s.cpu[s.main], end + 2000)
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 2: FSDP, 8 ranks, two shard groups of 4 + a world all-reduce
# ---------------------------------------------------------------------------------------


def gen_fsdp_8rank(seed: int = 2) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_fsdp_8rank.sqlite")
    rep.process(5990, "torchrun", {5990: "torchrun"})
    perm = list(range(8))
    rng.shuffle(perm)
    sims = []
    for rank in range(8):
        pid = 6000 + 3 * perm[rank]
        proc = rep.process(pid, "python3", {pid: "python3", pid + 1: "pt_autograd_0"})
        sim = RankSim(rep, proc, rng, rank=rank, device=rank, start=T0 + rng.randint(0, 200_000))
        _add_rank_marker(rep, sim, rank=rank, local_rank=rank, world=8, host="node-b")
        sims.append(sim)
    groups = {"1": sims[0:4], "2": sims[4:8]}
    granks = {"1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}
    shard_in = 4194304  # per-rank all_gather input (bytes, bf16)
    S = 4 * shard_in
    slow_rank = 6

    def late(s):
        return rng.randint(100_000, 400_000) if (s.rank == slow_rank and rng.random() < 0.75) else 0

    def all_gather(step, layer, caller):
        for pg, members in groups.items():
            pend = [
                s.wrapper_collective(
                    s.main,
                    "all_gather",
                    api="all_gather_single",
                    nbytes=S,
                    dtype="bfloat16",
                    itemsize=2,
                    pg=pg,
                    gsize=4,
                    granks=granks[pg],
                    step=step,
                    caller=caller,
                    kernel="ncclDevKernel_AllGather_RING_LL",
                    stream=13,
                    late_ns=late(s),
                )
                for s in members
            ]
            finish_collective(pend, _xfer(S, 90.0), rng, record=f"ag{layer}")

    def reduce_scatter(step, layer):
        for pg, members in groups.items():
            pend = [
                s.wrapper_collective(
                    s.main,
                    "reduce_scatter",
                    api="reduce_scatter_single",
                    nbytes=S,
                    dtype="bfloat16",
                    itemsize=2,
                    pg=pg,
                    gsize=4,
                    granks=granks[pg],
                    step=step,
                    caller="fsdp_train.py:66 train_step",
                    kernel="ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",
                    stream=17,
                    wait=(f"bwd{layer}",),
                    late_ns=late(s),
                )
                for s in members
            ]
            finish_collective(pend, _xfer(S, 85.0), rng, record=f"rs{layer}")

    for step in range(3):
        for s in sims:
            s.advance(s.main, rng.randint(40_000, 120_000))
            s.step_start = s.cpu[s.main]
        for layer in (0, 1):
            all_gather(step, layer, "fsdp_train.py:64 train_step")
            for s in sims:
                s.compute(s.main, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 300_000, wait=(f"ag{layer}",))
                s.compute(s.main, "vectorized_elementwise_kernel", 7, 40_000)
        for layer in (1, 0):
            all_gather(step, layer, "fsdp_train.py:66 train_step")
            for s in sims:
                s.compute(
                    s.main,
                    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                    7,
                    550_000,
                    wait=(f"ag{layer}",),
                    record=f"bwd{layer}",
                )
            reduce_scatter(step, layer)
        pend = [
            s.wrapper_collective(
                s.main,
                "all_reduce",
                api="all_reduce",
                nbytes=4096,
                dtype="float32",
                itemsize=4,
                pg=0,
                gsize=8,
                step=step,
                caller="fsdp_train.py:71 clip_grad_norm_",
                kernel="ncclDevKernel_AllReduce_Sum_f32_TREE_LL128",
                stream=21,
                wait=("rs0",),
                late_ns=late(s),
            )
            for s in sims
        ]
        finish_collective(pend, _xfer(4096, 2.0), rng, record="norm")
        for s in sims:
            s.compute(s.main, "vectorized_elementwise_kernel", 7, 60_000, wait=("norm",))
            end = s.sync(s.main)
            rep.range(
                s.proc, s.main, s.step_start, end + 1000, registered=nvtx_format.format_step_marker(step), domain=1
            )
            s.cpu[s.main] = max(s.cpu[s.main], end + 2000)
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 3: gloo on CPU, 2 ranks, NVTX only
# ---------------------------------------------------------------------------------------


def gen_gloo_cpu(seed: int = 3) -> list[Report]:
    rng = random.Random(seed)
    rep = Report("synthetic_gloo_cpu.sqlite", cuda=False)
    rep.process(7001, "torchrun", {7001: "torchrun"})
    procs = [
        rep.process(7020, "python3", {7020: "python3", 7023: "python3"}),
        rep.process(7014, "python3", {7014: "python3"}),
    ]
    cpu = {}
    seq = [defaultdict(int), defaultdict(int)]
    for rank, p in enumerate(procs):
        t = T0 + rng.randint(0, 500_000)
        rep.range(p, p.pid, t, t + 15_000, text="init_process_group")  # default domain, inline text
        rep.domain_create(p, p.pid, t + 20_000, nvtx_format.DOMAIN, 1)
        rep.mark(p, p.pid, t + 22_000, registered=nvtx_format.format_rank_marker(rank, rank, 2, "cpu-host"), domain=1)
        cpu[rank] = t + 30_000

    def coll(ranks, op, api, nbytes, dtype, numel, xfer, caller, pg=0, gsize=2):
        starts, msgs = {}, {}
        for r in ranks:
            cpu[r] += rng.randint(20_000, 400_000)
            starts[r] = cpu[r]
            s = seq[r][str(pg)]
            seq[r][str(pg)] += 1
            msgs[r] = nvtx_format.format_collective(
                op[r] if isinstance(op, dict) else op,
                api=api[r] if isinstance(api, dict) else api,
                bytes=nbytes,
                dtype=dtype,
                numel=numel,
                pg=pg,
                gsize=gsize,
                seq=s,
                caller=caller,
            )
        last = max(starts.values())
        for r in ranks:
            end = last + xfer + rng.randint(0, 3000)
            rep.range(procs[r], procs[r].pid, starts[r], end, registered=msgs[r], domain=1)
            cpu[r] = end

    for _ in range(3):
        for r in (0, 1):  # unrelated user range in the default domain (must be ignored)
            s0 = cpu[r] + 1000
            cpu[r] = s0 + rng.randint(200_000, 600_000)
            rep.range(procs[r], procs[r].pid, s0, cpu[r], text="forward")
        coll(
            (0, 1),
            "all_reduce",
            "all_reduce",
            4194304,
            "float32",
            1048576,
            _xfer(4194304, 1.5),
            "cpu_train.py:31 train_step",
        )
    coll((0, 1), "broadcast", "broadcast", 1048576, "float32", 262144, _xfer(1048576, 1.2), "cpu_train.py:20 main")
    coll(
        (0, 1),
        "all_gather",
        "all_gather",
        2 * 524288,
        "float32",
        262144,
        _xfer(1048576, 1.0),
        "cpu_train.py:44 evaluate",
    )
    coll((0, 1), "barrier", "barrier", 0, None, None, 40_000, "cpu_train.py:47 evaluate")
    coll(
        (0, 1),
        {0: "send", 1: "recv"},
        {0: "send", 1: "recv"},
        524288,
        "float32",
        131072,
        _xfer(524288, 1.0),
        "cpu_train.py:52 exchange",
    )
    coll((0, 1), "barrier", "barrier", 0, None, None, 35_000, "cpu_train.py:55 main")
    return [rep]


# ---------------------------------------------------------------------------------------
# Sample 4: no wrapper, 2 nodes x 2 ranks, one report per node on one clock
# ---------------------------------------------------------------------------------------


def gen_nowrapper_2node(seed: int = 4) -> list[Report]:
    rng = random.Random(seed)
    reps = [Report("node0.sqlite"), Report("node1.sqlite")]
    sims = []
    for node, rep in enumerate(reps):
        rep.process(1190, "torchrun", {1190: "torchrun"})
        for local in range(2):
            pid = 1200 + local  # the same pids (and globalPids) on both nodes
            proc = rep.process(pid, "python3", {pid: "python3", pid + 40: "pt_nccl_watchdg"})
            sim = RankSim(rep, proc, rng, rank=2 * node + local, device=local, start=T0 + rng.randint(0, 400_000))
            sim.domain_done = False
            sims.append(sim)
    drop = (3, 1, 0)  # (rank, step, all_reduce index): kernel without a launch row
    for step in range(3):
        for s in sims:
            s.advance(s.main, rng.randint(50_000, 120_000))
            for k in range(3):
                s.compute(
                    s.main,
                    "ampere_sgemm_128x64_nn" if k != 1 else "vectorized_elementwise_kernel",
                    7,
                    350_000 if k != 1 else 50_000,
                    record=f"c{k}",
                    torch_range="aten::mm" if k != 1 else "aten::add",
                )
        for i in range(2):
            pend = []
            for s in sims:
                if not s.domain_done:  # NCCL registers its NVTX domain at its first call
                    s.rep.domain_create(s.proc, s.main, s.cpu[s.main], "NCCL", NCCL_DOMAIN_ID)
                    s.advance(s.main, 5000)
                    s.domain_done = True
                late = rng.randint(20_000, 120_000) if s.rank >= 2 else 0  # the other node arrives later
                pend.append(
                    s.torch_collective(
                        s.main,
                        "all_reduce",
                        kernel="ncclKernel_AllReduce_RING_LL_Sum_float",
                        stream=13,
                        wait=(f"c{2 * i}",),
                        late_ns=late,
                        drop_launch=(s.rank, step, i) == drop,
                    )
                )
            finish_collective(pend, _xfer(8388608, 40.0), rng, record=f"ar{i}")
        pend = [
            s.torch_collective(
                s.main,
                "all_to_all",
                kernel="ncclDevKernel_SendRecv",
                stream=13,
                wait=("ar1",),
                launch=LAUNCH_DRIVER,
                op_id_suffix=True,
                nccl_p2p_peers=4,
            )
            for s in sims
        ]
        finish_collective(pend, _xfer(4194304, 20.0), rng, record="a2a")
        for s in sims:
            s.compute(s.main, "vectorized_elementwise_kernel", 7, 40_000, wait=("a2a",), torch_range="aten::add_")
            s.sync(s.main)
    return reps


# ---------------------------------------------------------------------------------------
# Ground truth (plain Python, from the generated events)
# ---------------------------------------------------------------------------------------

_FAMILY = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "send",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}
_ALGOS = ("RING", "TREE", "COLLNET", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT")
_PROTOS = ("LL", "LL128", "SIMPLE")
_DTYPES = {
    "float": "float32",
    "f32": "float32",
    "half": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "f64": "float64",
    "int8_t": "int8",
    "i8": "int8",
    "uint8_t": "uint8",
    "u8": "uint8",
    "int32_t": "int32",
    "i32": "int32",
    "uint32_t": "uint32",
    "u32": "uint32",
    "int64_t": "int64",
    "i64": "int64",
    "uint64_t": "uint64",
    "u64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


def parse_kernel_name(name: str) -> dict:
    """op family, algo, proto, dtype (torch spelling) from an NCCL kernel name (all three families)."""
    tokens = name.split("_")
    fam = tokens[1] if len(tokens) > 1 else ""
    return {
        "op": _FAMILY.get(fam),
        "algo": next((t for t in tokens[2:] if t in _ALGOS), None),
        "proto": next((t for t in tokens[2:] if t in _PROTOS), None),
        "dtype": next((_DTYPES[t] for t in tokens[2:] if t in _DTYPES), None),
    }


_TORCH_RANGE = re.compile(r"^nccl:([a-z_]+)(,|$)")


def _none_if_empty(v):
    return None if v in (None, "") else v


def _int_or_none(v):
    return None if v in (None, "") else int(v)


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _union_len(intervals):
    return sum(e - s for s, e in _union(intervals))


def _minus_len(a, b):
    """length of union(a) minus union(b)."""
    ua, ub = _union(a), _union(b)
    total = 0
    for s, e in ua:
        covered = 0
        for bs, be in ub:
            lo, hi = max(s, bs), min(e, be)
            if hi > lo:
                covered += hi - lo
        total += (e - s) - covered
    return total


def _num(x):
    """int when integral (p50 may be .5)."""
    x = float(x)
    return int(x) if x.is_integer() else x


def compute_truth(reports: list[Report], sample: str, seed: int, *, exposed: bool = True) -> dict:
    rows = []
    proc_info = []  # (report, proc, marker, events)
    for rep in reports:
        for proc in rep.procs:
            nv = [e for e in rep.nvtx if pid_of(e["globalTid"]) == proc.pid]
            rt = [r for r in rep.runtime if pid_of(r["globalTid"]) == proc.pid]
            ks = [k for k in rep.kernels if k["globalPid"] == proc.gpid]
            by_corr = {r["correlationId"]: r for r in rt}
            assert len(by_corr) == len(rt), "correlation ids are unique within a process"
            marker = None
            wrapper_rows = []
            claimed = set()
            nccl = [k for k in ks if k["name"].startswith("nccl")]
            for e in nv:
                name = e["text"] if e["text"] is not None else e["registered"]
                if e["eventType"] in (NVTX_PUSHPOP, NVTX_STARTEND, NVTX_MARK) and name.startswith(
                    nvtx_format.RANK_PREFIX + "|"
                ):
                    marker = nvtx_format.parse(name)
                if e["eventType"] not in (NVTX_PUSHPOP, NVTX_STARTEND) or not name.startswith(
                    nvtx_format.COLLECTIVE_PREFIX
                ):
                    continue
                f = nvtx_format.parse(name)
                mine = []
                for k in nccl:
                    call = by_corr.get(k["correlationId"])
                    if (
                        call
                        and call["globalTid"] == e["globalTid"]
                        and e["start"] <= call["start"]
                        and call["end"] <= e["end"]
                    ):
                        mine.append(k)
                        claimed.add(id(k))
                mine.sort(key=lambda k: (k["start"], k["end"]))
                row = {
                    "op": f["kind"][len(nvtx_format.COLLECTIVE_PREFIX) :],
                    "api": _none_if_empty(f["api"]),
                    "bytes": _int_or_none(f["bytes"]),
                    "dtype": _none_if_empty(f["dtype"]),
                    "numel": _int_or_none(f["numel"]),
                    "group": _none_if_empty(f["pg"]),
                    "group_size": _int_or_none(f["gsize"]),
                    "group_ranks": _none_if_empty(f["granks"]),
                    "seq": _int_or_none(f["seq"]),
                    "caller": _none_if_empty(f.get("caller")),
                    "step": _int_or_none(f["step"]),
                    "cpu_start": e["start"],
                    "cpu_end": e["end"],
                    "tid": tid_of(e["globalTid"]),
                    "source": "wrapper",
                }
                _fill_gpu(row, mine)
                wrapper_rows.append(row)
            kernel_rows = []
            for k in nccl:
                if id(k) in claimed:
                    continue
                info = parse_kernel_name(k["name"])
                call = by_corr.get(k["correlationId"])
                op, source, cpu = info["op"], "kernel_name", None
                tid = None
                if call is not None:
                    tid = tid_of(call["globalTid"])
                    cpu = (call["start"], call["end"])
                    enclosing = [
                        e
                        for e in nv
                        if e["eventType"] in (NVTX_PUSHPOP, NVTX_STARTEND)
                        and e["globalTid"] == call["globalTid"]
                        and e["text"] is not None
                        and _TORCH_RANGE.match(e["text"])
                        and e["start"] <= call["start"]
                        and call["end"] <= e["end"]
                    ]
                    if enclosing:
                        inner = max(enclosing, key=lambda e: (e["start"], -e["end"]))
                        source = "torch_range"
                        cpu = (inner["start"], inner["end"])
                        if info["op"] == "send":  # SendRecv takes the PyTorch op
                            op = _TORCH_RANGE.match(inner["text"]).group(1)
                row = {
                    "op": op,
                    "api": None,
                    "bytes": None,
                    "dtype": info["dtype"],
                    "numel": None,
                    "group": None,
                    "group_size": None,
                    "group_ranks": None,
                    "seq": None,
                    "caller": None,
                    "step": None,
                    "cpu_start": cpu[0] if cpu else None,
                    "cpu_end": cpu[1] if cpu else None,
                    "tid": tid,
                    "source": source,
                }
                _fill_gpu(row, [k])
                kernel_rows.append(row)
            for row in wrapper_rows + kernel_rows:
                row.update(report=rep.name, pid=proc.pid)
            ends = (
                [e["end"] if e["end"] is not None else e["start"] for e in nv]
                + [r["end"] for r in rt]
                + [k["end"] for k in ks]
            )
            starts = [e["start"] for e in nv] + [r["start"] for r in rt] + [k["start"] for k in ks]
            elapsed = (max(ends) - min(starts)) if starts else 0
            comp = [(k["start"], k["end"]) for k in ks if not k["name"].startswith("nccl")]
            comm = [(k["start"], k["end"]) for k in nccl]
            exposed_ns = _minus_len(comm, comp) if (ks and exposed) else None
            proc_info.append(
                {
                    "report": rep.name,
                    "proc": proc,
                    "marker": marker,
                    "rows": wrapper_rows + kernel_rows,
                    "elapsed_ns": elapsed,
                    "exposed_ns": exposed_ns,
                }
            )

    # ranks
    with_coll = [pi for pi in proc_info if pi["rows"]]
    marked = [pi for pi in with_coll if pi["marker"]]
    for pi in marked:
        m = pi["marker"]
        pi["rank"], pi["local_rank"], pi["host"] = int(m["rank"]), int(m["local_rank"]), _none_if_empty(m["host"])
    nxt = max((pi["rank"] for pi in marked), default=-1) + 1
    for pi in sorted((pi for pi in with_coll if not pi["marker"]), key=lambda pi: (pi["report"], pi["proc"].pid)):
        pi["rank"], pi["local_rank"], pi["host"] = nxt, None, None
        nxt += 1
    for pi in with_coll:
        for row in pi["rows"]:
            row.update(rank=pi["rank"], local_rank=pi["local_rank"], host=pi["host"])
            rows.append(row)

    # seq and inferred group size for rows without wrapper
    by_rank_op = defaultdict(list)
    for row in rows:
        if row["source"] != "wrapper":
            by_rank_op[(row["rank"], row["op"])].append(row)
    for lst in by_rank_op.values():
        lst.sort(key=lambda r: (r["gpu_start"], r["gpu_end"]))
        for i, row in enumerate(lst):
            row["seq"] = i
    share = defaultdict(set)
    for row in rows:
        if row["source"] != "wrapper":
            share[(row["op"], row["seq"])].add(row["rank"])
    for row in rows:
        if row["source"] != "wrapper":
            row["group_size"] = len(share[(row["op"], row["seq"])])

    # logical collectives
    logical = defaultdict(list)
    for row in rows:
        logical[(row["group"], row["op"], row["seq"])].append(row)
    lat = {}
    for key, lst in logical.items():
        lat[key] = min(r["duration_ns"] for r in lst)
        for r in lst:
            r["latency_ns"] = lat[key]
            r["wait_ns"] = r["duration_ns"] - lat[key]

    def summarize(with_caller):
        agg = defaultdict(lambda: {"lat": [], "calls": 0, "ranks": set(), "dtypes": set()})
        for key, lst in logical.items():
            r0 = lst[0]
            sk = (r0["op"], r0["bytes"], r0["group_size"]) + ((r0["caller"],) if with_caller else ())
            for r in lst:
                assert (r["bytes"], r["group_size"]) == (r0["bytes"], r0["group_size"]), key
            a = agg[sk]
            a["lat"].append(lat[key])
            a["calls"] += len(lst)
            a["ranks"].update(r["rank"] for r in lst)
            a["dtypes"].update(r["dtype"] for r in lst)
        out = []
        for sk, a in agg.items():
            op, nbytes, gsize = sk[:3]
            count = len(a["lat"])
            total = sum(a["lat"])
            avg = total / count
            algbw = (nbytes / avg) if (nbytes is not None and avg > 0) else None
            factor = busbw_factor(op, gsize)
            row = {
                "op": op,
                "bytes": nbytes,
                "group_size": gsize,
                "count": count,
                "calls": a["calls"],
                "ranks": len(a["ranks"]),
                "total_ns": total,
                "p50_ns": _num(numpy.median(a["lat"])),
                "max_ns": max(a["lat"]),
                "avg_ns": avg,
                "algbw_GBps": algbw,
                "busbw_GBps": (algbw * factor) if (algbw is not None and factor is not None) else None,
                "dtype": next(iter(a["dtypes"])) if len(a["dtypes"]) == 1 else None,
            }
            if with_caller:
                row["caller"] = sk[3]
            out.append(row)
        out.sort(key=_summary_key)
        return out

    # ranks table
    rank_rows = []
    for pi in sorted(with_coll, key=lambda pi: pi["rank"]):
        rs = pi["rows"]
        rank_rows.append(
            {
                "rank": pi["rank"],
                "local_rank": pi["local_rank"],
                "host": pi["host"],
                "report": pi["report"],
                "pid": pi["proc"].pid,
                "calls": len(rs),
                "bytes": sum(r["bytes"] or 0 for r in rs),
                "comm_ns": sum(r["duration_ns"] for r in rs),
                "wait_ns": sum(r["wait_ns"] for r in rs),
                "elapsed_ns": pi["elapsed_ns"],
                **({"exposed_ns": pi["exposed_ns"]} if pi["exposed_ns"] is not None else {}),
            }
        )

    # skew
    per = {
        rr["rank"]: {"rank": rr["rank"], "late_count": 0, "arrival_delay_ns_sum": 0, "wait_ns": 0, "instances": 0}
        for rr in rank_rows
    }
    instances = 0
    for lst in logical.values():
        if len(lst) < 2:
            continue
        instances += 1
        arr = {r["rank"]: (r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"]) for r in lst}
        first = min(arr.values())
        last_t = max(arr.values())
        last_rank = min(rk for rk, t in arr.items() if t == last_t)
        per[last_rank]["late_count"] += 1
        for r in lst:
            p = per[r["rank"]]
            p["arrival_delay_ns_sum"] += arr[r["rank"]] - first
            p["wait_ns"] += r["wait_ns"]
            p["instances"] += 1
    for p in per.values():
        p["avg_arrival_delay_ns"] = (p["arrival_delay_ns_sum"] / p["instances"]) if p["instances"] else None
    straggler = None
    if instances:
        straggler = min(per.values(), key=lambda p: (-p["late_count"], p["rank"]))["rank"]

    out_rows = []
    for r in sorted(
        rows, key=lambda r: (r["rank"], r["gpu_start"] if r["gpu_start"] is not None else r["cpu_start"], r["op"])
    ):
        out_rows.append({c: r.get(c) for c in _ROW_KEYS})
    return {
        "schema": TRUTH_SCHEMA,
        "generator": f"nsyscomm.synth v{GENERATOR_VERSION}",
        "sample": sample,
        "seed": seed,
        "reports": [rep.name for rep in reports],
        "collectives_count": len(rows),
        "logical_count": len(logical),
        "collectives": out_rows,
        "summary": summarize(False),
        "by_caller": summarize(True),
        "ranks": rank_rows,
        "skew": {"straggler_rank": straggler, "instances": instances, "per_rank": [per[k] for k in sorted(per)]},
    }


_ROW_KEYS = (
    "report",
    "rank",
    "local_rank",
    "host",
    "pid",
    "tid",
    "op",
    "api",
    "bytes",
    "dtype",
    "numel",
    "group",
    "group_size",
    "group_ranks",
    "seq",
    "caller",
    "step",
    "cpu_start",
    "cpu_end",
    "gpu_start",
    "gpu_end",
    "stream",
    "device",
    "duration_ns",
    "source",
    "kernel",
    "algo",
    "proto",
    "kernels",
    "kernel_ns",
    "latency_ns",
    "wait_ns",
)


def _fill_gpu(row, ks):
    if ks:
        k0 = ks[0]
        info = parse_kernel_name(k0["name"])
        row.update(
            gpu_start=min(k["start"] for k in ks),
            gpu_end=max(k["end"] for k in ks),
            stream=k0["streamId"],
            device=k0["deviceId"],
            kernel=k0["name"],
            algo=info["algo"],
            proto=info["proto"],
            kernels=len(ks),
            kernel_ns=sum(k["end"] - k["start"] for k in ks),
        )
        row["duration_ns"] = row["gpu_end"] - row["gpu_start"]
    else:
        row.update(
            gpu_start=None,
            gpu_end=None,
            stream=None,
            device=None,
            kernel=None,
            algo=None,
            proto=None,
            kernels=0,
            kernel_ns=0,
        )
        row["duration_ns"] = row["cpu_end"] - row["cpu_start"]


def _summary_key(r):
    def k(v):
        return (0, "") if v is None else (1, v)

    return (r["op"], k(r["bytes"]), k(r["group_size"]), k(r.get("caller")))


# ---------------------------------------------------------------------------------------
# Samples and CLI
# ---------------------------------------------------------------------------------------

SAMPLES = {
    # name: (generator, seed, folder?)
    "synthetic_ddp_4rank": (gen_ddp_4rank, 1, False),
    "synthetic_fsdp_8rank": (gen_fsdp_8rank, 2, False),
    "synthetic_gloo_cpu": (gen_gloo_cpu, 3, False),
    "synthetic_nowrapper_2node": (gen_nowrapper_2node, 4, True),
}


def truth_json(truth: dict) -> str:
    return json.dumps(truth, sort_keys=True, indent=1) + "\n"


def generate(name: str, outdir: str | os.PathLike, seed: int | None = None) -> dict:
    """Generate one sample into ``outdir``; returns its truth dict."""
    gen, default_seed, folder = SAMPLES[name]
    seed = default_seed if seed is None else seed
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    reports = gen(seed)
    target = outdir / name if folder else outdir
    target.mkdir(parents=True, exist_ok=True)
    for rep in reports:
        if not folder:
            assert rep.name == f"{name}.sqlite"
        write_sqlite(rep, target / rep.name, seed)
    truth = compute_truth(reports, name, seed)
    (outdir / f"{name}.truth.json").write_text(truth_json(truth))
    return truth


def generate_all(outdir) -> dict[str, dict]:
    return {name: generate(name, outdir) for name in SAMPLES}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m nsyscomm.synth OUTDIR", file=sys.stderr)
        return 2
    for name, truth in generate_all(argv[0]).items():
        print(
            f"{name}: {truth['collectives_count']} rows, {truth['logical_count']} logical collectives, "
            f"straggler {truth['skew']['straggler_rank']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
