"""The in-memory report: the nsys tables and their columns, ids as nsys packs them, processes
and the events a generator adds (Report)."""

from __future__ import annotations

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
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL",
        "end INTEGER NOT NULL",
        "deviceId INTEGER NOT NULL",
        "contextId INTEGER NOT NULL",
        "greenContextId INTEGER",
        "streamId INTEGER NOT NULL",
        "correlationId INTEGER",
        "globalPid INTEGER",
        "bytes INTEGER NOT NULL",
        "copyKind INTEGER NOT NULL",
        "deprecatedSrcId INTEGER",
        "srcKind INTEGER",
        "dstKind INTEGER",
        "srcDeviceId INTEGER",
        "srcContextId INTEGER",
        "dstDeviceId INTEGER",
        "dstContextId INTEGER",
        "migrationCause INTEGER",
        "graphNodeId INTEGER",
        "virtualAddress INTEGER",
        "copyCount INTEGER",
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
    "cudaMemcpyAsync_v3020": 0,
}
MEMCPY_ASYNC = "cudaMemcpyAsync_v3020"
COPY_DEVICE_TO_DEVICE = 8  # ENUM_CUDA_MEMCPY_OPER

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
        self.memcpys: list[dict] = []  # written (CUPTI_ACTIVITY_KIND_MEMCPY) only when there are some

    def process(self, pid: int, name: str, threads: dict[int, str] | None = None, host: int = HOST_ID) -> Proc:
        p = Proc(pid, name, threads or {pid: name}, host)
        self.procs.append(p)
        return p

    # NVTX ----------------------------------------------------------------------------
    def range(
        self,
        proc: Proc,
        tid: int | None,
        start: int,
        end: int | None,
        *,
        text: str | None = None,
        registered: str | None = None,
        domain: int = 0,
        event_type: int = NVTX_PUSHPOP,
        uint64: int | None = None,
        call: dict | None = None,
        marker: dict | None = None,
    ) -> dict:
        """An NVTX range. ``call`` (a collective's fields) and ``marker`` (a rank marker's) are
        what the generator put into the message: the ground truth reads them here, as
        constructed, and never parses the message back with the code under test."""
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
            "call": call,
            "marker": marker,
        }
        self.nvtx.append(row)
        return row

    def mark(
        self,
        proc: Proc,
        tid: int | None,
        t: int,
        *,
        text: str | None = None,
        registered: str | None = None,
        domain: int = 0,
        marker: dict | None = None,
    ) -> dict:
        return self.range(
            proc, tid, t, None, text=text, registered=registered, domain=domain, event_type=NVTX_MARK, marker=marker
        )

    def domain_create(self, proc: Proc, tid: int | None, t: int, name: str, domain_id: int) -> dict:
        return self.range(proc, tid, t, None, text=name, domain=domain_id, event_type=NVTX_DOMAIN_CREATE)

    # CUDA ----------------------------------------------------------------------------
    def api_call(self, proc: Proc, tid: int | None, start: int, end: int, name: str, corr: int | None = None) -> dict:
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

    def kernel(self, proc: Proc, corr: int, *, device: int, stream: int, start: int, end: int, name: str) -> dict:
        nccl = name.startswith("nccl")
        row = {
            **_on_device(proc, corr, device, stream, start, end),
            "name": name,
            "gridId": proc.next_grid(),
            "nccl": nccl,
        }
        self.kernels.append(row)
        return row

    def memcpy(self, proc: Proc, corr: int, *, device: int, stream: int, start: int, end: int, nbytes: int) -> dict:
        """A device-to-device copy launched by the runtime call of correlation id corr."""
        row = {
            **_on_device(proc, corr, device, stream, start, end),
            "bytes": nbytes,
            "copyKind": COPY_DEVICE_TO_DEVICE,
            "srcKind": 2,
            "dstKind": 2,
            "srcDeviceId": device,
            "srcContextId": device + 1,
            "dstDeviceId": device,
            "dstContextId": device + 1,
            "copyCount": 1,
        }
        self.memcpys.append(row)
        return row


def _on_device(proc: Proc, corr: int, device: int, stream: int, start: int, end: int) -> dict:
    """The columns a kernel and a copy share: where and when it ran, and the launch it came from."""
    return {
        "start": start,
        "end": end,
        "deviceId": device,
        "contextId": device + 1,
        "greenContextId": 0,
        "streamId": stream,
        "correlationId": corr,
        "globalPid": proc.gpid,
    }
