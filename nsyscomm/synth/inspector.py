"""NCCL Inspector dumps written from known calls, byte for byte as the plugin writes them (tests
only; no public dump exists to test against).

Source: NVIDIA/nccl ``plugins/profiler/inspector`` (inspector_json.cc, json.cc, inspector.cc,
inspector_plugin.cc) at 5067397c (master, format "v4.0") and the "v4.2" writer of the dev
branch: per line one compact object (no spaces), keys in the writer's order; integers as
``%d``/``%lu``; doubles as ``%lf`` (six decimals); strings with ``"``, ``\\``, ``/``, tab and
newline escaped. ``coll_sn`` is NCCL's per-communicator, per-function sequence number (from 0);
``p2p_sn`` the plugin's per-communicator count of a process's point-to-point calls (from 1);
``coll_msg_size_bytes`` the per-rank count times the type size; the execution time the longest
channel's GPU time in whole microseconds; bandwidths as inspectorComputeOpBw computes them;
timestamps gettimeofday's microseconds. "v4.2" adds ``coll_algo``/``coll_proto`` and, per
communicator and dump, a ``dump_stats`` record first.

``calls_from_reports`` turns a generated nsys job (nsyscomm.synth) into the calls the plugin
would have recorded of the same job, so that one truth gives both inputs."""

from __future__ import annotations

import gzip
import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from nsyscomm.synth.report import SESSION_SYSTEM_CLOCK_NS, SESSION_UTC_EPOCH_NS, Report
from nsyscomm.synth.truth_calls import assign_ranks, proc_calls

# the nsys session's clock -> the wall clock the plugin reads (gettimeofday)
WALL_NS = SESSION_UTC_EPOCH_NS - SESSION_SYSTEM_CLOCK_NS
MIN_SIZE = 8192  # NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES's default: smaller calls are not recorded
_FUNC = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "send": "Send",
    "recv": "Recv",
}
_WHOLE = {"AllGather", "ReduceScatter"}  # nccl-tests' S is n x the per-rank size


@dataclass
class Comm:
    id: str
    rank: int
    n_ranks: int
    nnodes: int = 1
    name: str = "unknown"


@dataclass
class Call:
    """One call the plugin records on one process."""

    host: str
    pid: int
    comm: Comm
    func: str
    sn: int
    msg_bytes: int  # per rank: count x type size
    start_ns: int  # the call's enqueue on the host
    stop_ns: int
    kernel: tuple[int, int]  # its kernel's GPU start and end (ns)
    peer: int | None = None  # point-to-point: the peer's rank within the communicator
    timing: str = "kernel_gpu"
    algo: str = "RING"
    proto: str = "SIMPLE"
    channels: int = 2
    truth: dict = field(default_factory=dict)  # what the test checks against


def comm_id(name: str) -> str:
    """A communicator hash written as the plugin writes it (hex, no padding)."""
    return f"0x{int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], 'big'):x}"


def _s(v: str) -> str:
    out = v.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/").replace("\t", "\\t").replace("\n", "\\n")
    return f'"{out}"'


def _obj(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}"


def _f(x: float) -> str:
    return f"{x:f}"  # C's %lf: six decimals


def _bw(c: Call) -> tuple[float, float]:
    """inspectorComputeOpBw: traffic / time, times the nccl-tests factor."""
    n, t = c.comm.n_ranks, (c.kernel[1] - c.kernel[0]) // 1000 / 1e6
    traffic = c.msg_bytes * (n if c.func in _WHOLE else 1)
    factor = {"AllReduce": 2 * (n - 1) / n, "AllGather": (n - 1) / n, "ReduceScatter": (n - 1) / n}.get(c.func, 1.0)
    algo = traffic / 1e9 / t if t else 0.0
    return algo, algo * factor


def _trace(c: Call, pre: str, first_sn: int) -> str:
    ks, ke = c.kernel
    # the channels' kernels as the proxy saw them: the first starts with the kernel, the last ends with it
    chans = [(ks + 150 * ch, ke - 200 * (c.channels - 1 - ch)) for ch in range(c.channels)]
    sn = [
        (f"{pre}_start_sn", str(first_sn)),
        (f"{pre}_stop_sn", str(first_sn + 1)),
        (
            "kernel_events",
            "["
            + ",".join(
                _obj(
                    [
                        ("channel_id", str(ch)),
                        ("kernel_start_sn", str(first_sn + 2 + 3 * ch)),
                        ("kernel_stop_sn", str(first_sn + 3 + 3 * ch)),
                        ("kernel_record_sn", str(first_sn + 4 + 3 * ch)),
                    ]
                )
                for ch in range(c.channels)
            )
            + "]",
        ),
    ]
    ts = [
        (f"{pre}_start_ts", str(c.start_ns // 1000)),
        (f"{pre}_stop_ts", str(c.stop_ns // 1000)),
        (
            "kernel_events",
            "["
            + ",".join(
                _obj(
                    [
                        ("channel_id", str(ch)),
                        ("kernel_start_ts", str(s // 1000)),
                        ("kernel_stop_ts", str(e // 1000)),
                        ("kernel_record_ts", str(e // 1000)),
                    ]
                )
                for ch, (s, e) in enumerate(chans)
            )
            + "]",
        ),
    ]
    return f',"event_trace_sn":{_obj(sn)},"event_trace_ts":{_obj(ts)}'


def _header(c: Call, version: str) -> str:
    h = [("id", _s(c.comm.id)), ("comm_name", _s(c.comm.name))]
    h += [("rank", str(c.comm.rank)), ("n_ranks", str(c.comm.n_ranks)), ("nnodes", str(c.comm.nnodes))]
    return _obj(h)


def _metadata(c: Call, version: str, dump_us: int) -> str:
    return _obj(
        [
            ("inspector_output_format_version", _s(version)),
            ("git_rev", _s("")),
            ("rec_mechanism", _s("nccl_profiler_interface")),
            ("dump_timestamp_us", str(dump_us)),
            ("hostname", _s(c.host)),
            ("pid", str(c.pid)),
        ]
    )


def record_line(c: Call, version: str = "v4.0", verbose: bool = True, dump_us: int = 0) -> str:
    """One record as the plugin writes it (without its newline)."""
    p2p = c.func in ("Send", "Recv")
    pre = "p2p" if p2p else "coll"
    algobw, busbw = _bw(c)
    perf = [(pre, _s(c.func))]
    if not p2p and version >= "v4.2":
        perf += [("coll_algo", _s(c.algo)), ("coll_proto", _s(c.proto))]
    perf.append((f"{pre}_sn", str(c.sn)))
    if p2p:
        perf.append(("p2p_peer", str(c.peer)))
    perf += [
        (f"{pre}_msg_size_bytes", str(c.msg_bytes)),
        (f"{pre}_exec_time_us", str((c.kernel[1] - c.kernel[0]) // 1000)),
        (f"{pre}_timing_source", _s(c.timing)),
        (f"{pre}_algobw_gbs", _f(algobw)),
        (f"{pre}_busbw_gbs", _f(busbw)),
    ]
    body = _obj(perf)
    if verbose:
        body = body[:-1] + _trace(c, pre, c.sn + 1 if p2p else 1) + "}"
    key = "p2p_perf" if p2p else "coll_perf"
    return f'{{"header":{_header(c, version)},"metadata":{_metadata(c, version, dump_us)},"{key}":{body}}}'


def _stats_line(c: Call, version: str, dump_us: int, colls: int, p2ps: int, dropped: int) -> str:
    stats = _obj(
        [
            ("coll_records", str(colls)),
            ("coll_dropped_total", str(dropped)),
            ("coll_dropped_since_last_dump", str(dropped)),
            ("p2p_records", str(p2ps)),
            ("p2p_dropped_total", "0"),
            ("p2p_dropped_since_last_dump", "0"),
        ]
    )
    return f'{{"header":{_header(c, version)},"metadata":{_metadata(c, version, dump_us)},"dump_stats":{stats}}}'


def dump_text(calls: list[Call], version: str = "v4.0", verbose: bool = True, dropped: int = 0) -> str:
    """One process's dump: per communicator (in the order first seen), its collectives in
    sequence order then its point-to-point calls, as one dump at the end of the job writes them."""
    by_comm: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        by_comm[c.comm.id].append(c)
    dump_us = max((c.kernel[1] for c in calls), default=0) // 1000 + 5000
    lines = []
    for cs in by_comm.values():
        colls = sorted((c for c in cs if c.func not in ("Send", "Recv")), key=lambda c: (c.start_ns, c.sn))
        p2ps = sorted((c for c in cs if c.func in ("Send", "Recv")), key=lambda c: c.sn)
        if version >= "v4.2":
            lines.append(_stats_line(cs[0], version, dump_us, len(colls), len(p2ps), dropped))
        lines += [record_line(c, version, verbose, dump_us) for c in colls + p2ps]
    return "".join(line + "\n" for line in lines)


def write_dumps(
    folder: Path,
    calls: list[Call],
    *,
    version: str = "v4.0",
    verbose: bool = True,
    gz: bool = False,
    suffix: str = ".log",
) -> list[Path]:
    """Each process's dump, ``<host>-pid<PID>.log`` (``.gz`` when gz), in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    by_proc: dict[tuple[str, int], list[Call]] = defaultdict(list)
    for c in calls:
        by_proc[(c.host, c.pid)].append(c)
    out = []
    for (host, pid), cs in sorted(by_proc.items()):
        text = dump_text(cs, version, verbose).encode()
        path = folder / f"{host}-pid{pid}{suffix}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(text, mtime=0) if gz else text)
        out.append(path)
    return out


def calls_from_reports(reports: list[Report], min_size: int = MIN_SIZE) -> list[Call]:
    """The calls the plugin records of a generated nsys job: its wrapper's calls (op, size, group,
    rank, kernel), each communicator's per-function sequence numbers counted as NCCL counts them,
    calls under the plugin's minimum size (NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES) left out."""
    procs = [proc_calls(rep, p, exposed=False) for rep in reports for p in rep.procs]
    rows = sorted(assign_ranks(procs), key=lambda r: (r["rank"], r["group"] or "", r["seq"] or 0))
    by_rank = {pc.rank: pc for pc in procs if pc.rows}
    hosts = {r: (pc.host or "host") for r, pc in by_rank.items()}
    sn: defaultdict[tuple[int, str, str], int] = defaultdict(int)
    out = []
    for r in rows:
        func = _FUNC[r["op"]]
        n = r["group_size"]
        members = [int(x) for x in r["group_ranks"].split(",")] if r["group_ranks"] else list(range(n))
        per_rank = r["bytes"] // n if func in _WHOLE else r["bytes"]
        key = (r["rank"], str(r["group"]), func)
        this_sn = sn[key]
        sn[key] += 1
        if per_rank < min_size:
            continue
        comm = Comm(
            id=comm_id(f"pg:{r['group']}"),
            rank=members.index(r["rank"]),
            n_ranks=n,
            nnodes=len({hosts.get(m, "host") for m in members}),
        )
        out.append(
            Call(
                host=hosts[r["rank"]],
                pid=r["pid"],
                comm=comm,
                func=func,
                sn=this_sn,
                msg_bytes=per_rank,
                start_ns=r["cpu_start"] + WALL_NS,
                stop_ns=r["cpu_end"] + WALL_NS,
                kernel=(r["gpu_start"] + WALL_NS, r["gpu_end"] + WALL_NS),
                truth={"rank": r["rank"], "bytes": r["bytes"]},
            )
        )
    return out


def size_bucket(nbytes: int) -> str:
    """inspectorPromFormatMessageSizeRange: the size's floor in its 1024-based unit, and one more."""
    if nbytes == 0:
        return "0B"
    units = ["B", "KB", "MB", "GB", "TB"]
    value, i = float(nbytes), 0
    while value >= 1024.0 and i < 4:
        value /= 1024.0
        i += 1
    lo = max(1, math.floor(value))
    return f"{lo}-{lo + 1}{units[i]}"


def prom_text(calls: list[Call], version: str = "v5.1", job: str = "4242") -> str:
    """One GPU's metrics file as the Prometheus mode writes it (inspector_prom.cc): per
    communicator, op, size bucket and algorithm/protocol, the geometric mean of the calls' bus
    bandwidth and the mean of their execution times, ``%.6g``."""
    groups: dict[tuple, list[Call]] = defaultdict(list)
    for c in calls:
        algo = f"{c.algo}_{c.proto}" if c.func not in ("Send", "Recv") else ""
        groups[(c.host, c.comm.name, c.comm.nnodes, c.comm.n_ranks, c.func, size_bucket(c.msg_bytes), algo)].append(c)
    lines = []
    for (host, comm, nnodes, nranks, func, size, algo), cs in groups.items():
        base = f'version="{version}",slurm_job_id="{job}",node="{host}",gpu="GPU0",comm_name="{comm}",n_nodes="{nnodes}",nranks="{nranks}"'
        p2p = func in ("Send", "Recv")
        labels = base + (
            f',p2p_operation="{func}",message_size="{size}"'
            if p2p
            else f',collective="{func}",message_size="{size}",algo_proto="{algo}"'
        )
        bws = [_bw(c)[1] for c in cs]
        gm = math.exp(sum(math.log(b) for b in bws) / len(bws)) if all(b > 0 for b in bws) else 0.0
        mean = sum((c.kernel[1] - c.kernel[0]) // 1000 for c in cs) / len(cs)
        pre = "nccl_p2p_" if p2p else "nccl_"
        lines.append(f"{pre}bus_bandwidth_gbs{{{labels}}} {gm:.6g}")
        lines.append(
            f"{'nccl_p2p_exec_time_microseconds' if p2p else 'nccl_collective_exec_time_microseconds'}{{{labels}}} {mean:.6g}"
        )
    return "".join(line + "\n" for line in lines)
