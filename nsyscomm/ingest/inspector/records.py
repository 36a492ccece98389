"""One NCCL Inspector dump (``<host>-pid<PID>.log``, ``.jsonl``, either gzipped): its JSON lines,
each record checked where it is read (docs/limits.md), as typed Records.

The writer (NCCL's ``plugins/profiler/inspector/inspector_json.cc``) puts one object per line:
``header`` (the communicator: ``id`` its hash as hex, ``comm_name``, ``rank`` within it,
``n_ranks``, ``nnodes``), ``metadata`` (format version, ``hostname``, ``pid``, ...), then one of
``coll_perf`` (``coll``, ``coll_sn``: the communicator's sequence number of that collective
function, ``coll_msg_size_bytes``: count x type size, per rank, ``coll_exec_time_us``: the
longest channel's GPU time, ``coll_timing_source``, bandwidths), ``p2p_perf`` (``p2p``,
``p2p_sn``: this process's count of its point-to-point calls on the communicator, ``p2p_peer``:
the peer's rank within it, ...) or ``dump_stats`` (records written and dropped by the plugin's
ring since the last dump, in newer versions). With ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` a record
also holds ``event_trace_ts``: the call's start and stop and each channel's kernel start and stop,
in microseconds of the host's wall clock (gettimeofday)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest import bounded, limits

FIX = "pass the folder NCCL_INSPECTOR_DUMP_DIR names, as the plugin wrote it"
# the dump's name as the plugin writes it, and the endings its example exporter accepts
_NAME = re.compile(r".+\.(log|jsonl)(\.gz)?$", re.IGNORECASE)
_SIGNATURE = b'"inspector_output_format_version"'
_MAX_US = int(limits.MAX_TS_US)

# NCCL's function names (ncclFuncToString) -> (canonical op, message size S as a multiple of the
# per-rank size: nccl-tests' S of an all-gather or reduce-scatter is the whole buffer, n x per rank)
FUNCS: dict[str, tuple[str, bool]] = {
    "AllReduce": ("all_reduce", False),
    "AllGather": ("all_gather", True),
    "AllGatherV": ("all_gather", True),
    "ReduceScatter": ("reduce_scatter", True),
    "Broadcast": ("broadcast", False),
    "Reduce": ("reduce", False),
    "All2All": ("all_to_all", True),
    "Send": ("send", False),
    "Recv": ("recv", False),
}
TIMING_GPU = "kernel_gpu"


@dataclass(frozen=True)
class Comm:
    """A communicator as one process's records name it."""

    id: str  # its hash as the plugin writes it ("0x7f8c496ae9f661")
    name: str  # comm_name ("unknown" when unset, absent in older versions)
    rank: int  # this process's rank within it
    n_ranks: int
    nnodes: int


@dataclass(slots=True)
class Record:
    """One completed collective or point-to-point call on one process."""

    comm: Comm
    p2p: bool
    func: str  # NCCL's function name (AllReduce, Send, ...)
    sn: int  # coll_sn / p2p_sn
    peer: int | None  # point-to-point: the peer's rank within the communicator
    msg_bytes: int  # count x type size, as the plugin measured it
    exec_us: int  # the plugin's execution time
    timing: str  # kernel_gpu | kernel_cpu | collective_cpu
    busbw_gbs: float | None  # the plugin's own bus bandwidth
    algo: str | None
    proto: str | None
    start_us: int | None  # verbose: the call's start (its enqueue on the host)
    stop_us: int | None
    kernel_start_us: int | None  # verbose: its first channel's kernel start
    kernel_stop_us: int | None  # verbose: its last channel's kernel stop


@dataclass
class Dump:
    """What one dump holds: its process and its records."""

    path: Path
    host: str
    pid: int
    version: str
    records: list[Record]
    dropped: int  # records the plugin said its ring dropped (dump_stats, newer versions)
    skipped: dict[str, int]  # records of an unknown function, by name


def named_like(path: Path) -> bool:
    return _NAME.match(path.name) is not None


def looks_like(path: Path) -> bool:
    """An Inspector dump by its name and its first line (the plugin's metadata key): cheap, only
    the head is read; read_dump says whether it is a good one."""
    import gzip

    if not named_like(path):
        return False
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        opener = gzip.open if gz else open
        with opener(path, "rb") as f:
            head = f.read(1 << 14)
    except (OSError, EOFError):
        return False
    return head.lstrip().startswith(b"{") and _SIGNATURE in head


def _int(v: object, what: str, path: Path, line: int, lo: int = 0, hi: int = _MAX_US) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError(f"{path}: line {line}: {what} is {str(v)[:40]!r}, not an integer from {lo} to {hi}; {FIX}")
    return v


def _str(v: object, what: str, path: Path, line: int) -> str:
    if not isinstance(v, str):
        raise InputError(f"{path}: line {line}: {what} is {str(v)[:40]!r}, not a string; {FIX}")
    return limits.cut_name(v)


def _float(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e18:
        return float(v)
    return None


def _comm(h: object, path: Path, line: int) -> Comm:
    if not isinstance(h, dict):
        raise InputError(f"{path}: line {line}: no header object; {FIX}")
    n = _int(h.get("n_ranks"), "header.n_ranks", path, line, 1, limits.MAX_GROUP)
    return Comm(
        id=_str(h.get("id"), "header.id", path, line),
        name=_str(h.get("comm_name", "unknown"), "header.comm_name", path, line),
        rank=_int(h.get("rank"), "header.rank", path, line, 0, n - 1),
        n_ranks=n,
        nnodes=_int(h.get("nnodes", 1), "header.nnodes", path, line, 0, limits.MAX_GROUP),
    )


def _trace(perf: dict, pre: str, path: Path, line: int) -> tuple[int | None, ...]:
    """The verbose timestamps: the call's start and stop, the kernels' first start and last stop."""
    ts = perf.get("event_trace_ts")
    if not isinstance(ts, dict):
        return None, None, None, None
    start = _int(ts.get(f"{pre}_start_ts"), f"{pre}_start_ts", path, line)
    stop = _int(ts.get(f"{pre}_stop_ts", start), f"{pre}_stop_ts", path, line)
    starts, stops = [], []
    for k in ts.get("kernel_events") or []:
        if not isinstance(k, dict):
            raise InputError(f"{path}: line {line}: a kernel event is not an object; {FIX}")
        ks = _int(k.get("kernel_start_ts", 0), "kernel_start_ts", path, line)
        ke = _int(k.get("kernel_stop_ts", 0), "kernel_stop_ts", path, line)
        if ks:  # a channel the plugin saw no start of holds 0
            starts.append(ks)
        if ke:
            stops.append(ke)
    return start, stop, (min(starts) if starts else None), (max(stops) if stops else None)


def _record(d: dict, path: Path, line: int, comms: dict[tuple, Comm]) -> Record:
    h = d.get("header")
    # every record repeats its communicator's header: checked once per distinct one
    key = tuple(h.values()) if isinstance(h, dict) else None
    comm = comms.get(key) if key is not None else None
    if comm is None:
        comm = _comm(h, path, line)
        if key is not None:
            comms[key] = comm
    p2p = "p2p_perf" in d
    perf = d.get("p2p_perf" if p2p else "coll_perf")
    if not isinstance(perf, dict):
        raise InputError(f"{path}: line {line}: neither coll_perf nor p2p_perf is an object; {FIX}")
    pre = "p2p" if p2p else "coll"
    func = _str(perf.get(pre), pre, path, line)
    peer = _int(perf.get("p2p_peer"), "p2p_peer", path, line, 0, comm.n_ranks - 1) if p2p else None
    algo, proto = perf.get("coll_algo"), perf.get("coll_proto")
    start, stop, kstart, kstop = _trace(perf, pre, path, line)
    return Record(
        comm=comm,
        p2p=p2p,
        func=func,
        sn=_int(perf.get(f"{pre}_sn"), f"{pre}_sn", path, line),
        peer=peer,
        msg_bytes=_int(perf.get(f"{pre}_msg_size_bytes"), f"{pre}_msg_size_bytes", path, line, 0, limits.MAX_BYTES),
        exec_us=_int(perf.get(f"{pre}_exec_time_us"), f"{pre}_exec_time_us", path, line),
        timing=_str(perf.get(f"{pre}_timing_source", "unknown"), f"{pre}_timing_source", path, line),
        busbw_gbs=_float(perf.get(f"{pre}_busbw_gbs")),
        algo=limits.cut_name(algo) if isinstance(algo, str) and algo != "unknown" else None,
        proto=limits.cut_name(proto) if isinstance(proto, str) and proto != "unknown" else None,
        start_us=start,
        stop_us=stop,
        kernel_start_us=kstart,
        kernel_stop_us=kstop,
    )


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    try:
        with bounded.open_text(path) as f:
            for i, text in enumerate(f, 1):
                if not text.strip():
                    continue
                try:
                    d = json.loads(text)
                except json.JSONDecodeError as e:
                    if not text.endswith("\n"):  # the plugin was writing it when the copy was taken
                        return
                    raise InputError(f"{path}: line {i} is not JSON ({e.msg}); {FIX}") from None
                if not isinstance(d, dict):
                    raise InputError(f"{path}: line {i} is not a JSON object; {FIX}")
                yield i, d
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}); check the path") from None
    except (EOFError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: a damaged dump ({type(e).__name__}); {FIX}") from None


def check_head(path: Path) -> None:
    """The dump's first record checked (discovery's test; the reader checks every line): an
    InputError naming the file and the fix when it is not the plugin's."""
    for i, d in _lines(Path(path)):
        meta = d.get("metadata")
        if not isinstance(meta, dict) or "inspector_output_format_version" not in meta:
            raise InputError(f"{path}: line {i} has no Inspector metadata; {FIX}")
        _comm(d.get("header"), Path(path), i)
        return
    raise InputError(f"{path}: no Inspector record in it; {FIX}")


def read_dump(path: Path) -> Dump:
    """Every record of the dump at path, checked; InputError naming the file, line and fix."""
    path = Path(path)
    host, pid, version = None, None, ""
    records: list[Record] = []
    dropped = 0
    skipped: dict[str, int] = {}
    comms: dict[tuple, Comm] = {}
    budget = limits.budget()
    for i, d in _lines(path):
        meta = d.get("metadata")
        if not isinstance(meta, dict) or "inspector_output_format_version" not in meta:
            raise InputError(f"{path}: line {i} has no Inspector metadata; {FIX}")
        if host is None:
            host = _str(meta.get("hostname"), "metadata.hostname", path, i)
            pid = _int(meta.get("pid"), "metadata.pid", path, i, 0, (1 << 63) - 1)
            version = _str(meta.get("inspector_output_format_version"), "format version", path, i)
        stats = d.get("dump_stats")
        if isinstance(stats, dict):
            for k in ("coll_dropped_since_last_dump", "p2p_dropped_since_last_dump"):
                dropped += _int(stats.get(k, 0), k, path, i, 0, 1 << 62)
            continue
        rec = _record(d, path, i, comms)
        if rec.func not in FUNCS or (rec.p2p != (rec.func in ("Send", "Recv"))):
            skipped[rec.func] = skipped.get(rec.func, 0) + 1
            continue
        records.append(rec)
        if len(records) * 400 > budget and (err := limits.over_budget(path, "records", len(records), 400)):
            raise err
    if host is None or pid is None:
        raise InputError(f"{path}: no Inspector record in it; {FIX}")
    return Dump(path, host, pid, version, records, dropped, skipped)
