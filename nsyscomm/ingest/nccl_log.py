"""NCCL_DEBUG=INFO logs and nccl-tests output (``all_reduce_perf`` and friends).

``parse(path)`` reads what NCCL says about itself at init: version, ranks, hosts/nodes,
transports per connection (P2P, SHM, NVLS, NET and which network plugin), channels, tuner.
``reference_curve(path)`` reads nccl-tests result tables as a reference bandwidth curve
(one row per message size) to compare a training run's collectives against.

Both tolerate the prefixes launchers add to every line: ``mpirun --tag-output`` (``[1,0]<stdout>:``,
which can also appear in the middle of a line when outputs interleave) and ``srun -l`` (``0: ``).
Nothing here keeps environment values, IPs or paths (logs carry them: see docs/architecture.md, "Facts about nsys exports", privacy).
"""

from __future__ import annotations

import gzip
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from nsyscomm.errors import InputError

_MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")
_SRUN_TAG = re.compile(r"^\s*\d+:\s")
_INFO = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN) (?P<msg>.*)$"
)
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_INIT = re.compile(
    r"(?:ncclCommInitRank(?:Config|Scalable)?\s+)?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) "
    r"nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: commId (?P<commid>0x[0-9a-f]+))?(?: localSize \d+)? - Init COMPLETE"
)
# "Init timings: rank 10 nranks 16 total 3.38 (kernels 0.24, bootstrap 2.40, ...)" (NCCL 2.20+;
# "Init timings - ncclCommInitRankConfig: rank ..." later): a communicator's setup, in seconds
_INIT_TIMINGS = re.compile(
    r"Init timings(?: - \w+)?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<total>[\d.]+)"
)
_VIA = re.compile(
    r"Channel \d+/\d+ : \d+\[[0-9a-f]+\] -> \d+\[[0-9a-f]+\](?: \[(?:send|receive)\])? via (?P<via>\S+(?: \S+)*?)(?:/\d+)?(?:/(?P<flags>[A-Z]+))?(?:\(.*\))?\s*$"
)
_CHANNELS = re.compile(
    r"(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?"
    r"(?P<p2p>\d+) p2p channels, (?P<perpeer>\d+) p2p channels per peer"
)
_RING = re.compile(r"Channel (?P<c>\d+)/(?P<n>\d+) :(?:\s+\d+)+\s*$")
_NETWORK = re.compile(r"Using network (?P<net>.+?)\s*$")
_TUNER_PLUGIN = re.compile(
    r"(?:TUNER/Plugin: Using tuner plugin|Using tuner plugin|TUNER/Plugin: Plugin name set by env to) (?P<t>\S+)"
)
_NT_DEVICE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+device\s+(?P<dev>\d+)"
    r"\s+\[[^\]]*\]\s+(?P<gpu>.+?)\s*$"
)
_NT_HEADER = re.compile(
    r"^#\s+nThread\s+(?P<nthread>\d+)\s+nGpus\s+(?P<ngpus>\d+)\s+minBytes\s+(?P<min>\d+)\s+maxBytes\s+(?P<max>\d+)"
)
_NT_COLUMNS = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw")
_NT_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+(?P<rest>.*)$"
)
_NT_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>[\d.]+)")
_NT_BINARY = re.compile(
    r"\b(?P<op>all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|gather|scatter|hypercube)_perf\b"
)

# nccl-tests binary -> canonical op
_BINARY_OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "sendrecv": "send",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "all_gather",
}


@dataclass
class NcclLog:
    path: str
    version: str | None = None  # "2.22.3"
    cuda: str | None = None  # "12.2", from "+cuda12.2"
    nranks: int | None = None  # largest communicator seen at init (or nccl-tests' rank list)
    nodes: int | None = None  # distinct hosts
    hosts: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    communicators: list[dict] = field(default_factory=list)  # {comm_id, nranks, ranks_seen}
    transports: dict[str, int] = field(default_factory=dict)  # P2P/CUMEM: 448, NET/AWS Libfabric: 512, ...
    transport_kinds: list[str] = field(default_factory=list)  # P2P, SHM, NET, NVLS, COLLNET
    network: str | None = None  # "AWS Libfabric", "IB", "Socket"
    gdr: bool | None = None  # GPUDirect RDMA used on NET connections
    channels: dict[str, int] = field(default_factory=dict)  # coll, collnet, nvls, p2p, p2p_per_peer
    nvls: bool = False
    tuner: str | None = None  # "internal" or the plugin's name
    gpus: list[str] = field(default_factory=list)
    nccl_tests: list[dict] = field(default_factory=list)  # per result table: op, ranks, avg_busbw_GBps, peak
    init_timings: list[dict] = field(default_factory=list)  # per communicator init: rank, nranks, total_s
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _lines(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = _MPI_TAG.sub("", raw.rstrip("\n"))
            line = _SRUN_TAG.sub("", line, count=1)
            yield line


def _check(path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"{path}: no such file; pass the output of a run with NCCL_DEBUG=INFO (or of nccl-tests' all_reduce_perf)"
        )
    return path


@dataclass
class _Seen:
    """What parse gathers over the lines before it sums them up in the NcclLog."""

    hosts: list[str] = field(default_factory=list)  # of the INFO lines, in order of appearance
    transports: Counter = field(default_factory=Counter)  # connection kind -> connections
    comms: dict[str, dict] = field(default_factory=dict)  # communicator -> {comm_id, nranks, ranks_seen}
    ranks: set[int] = field(default_factory=set)  # ranks that completed an init
    tuner_internal: bool = False
    saw_info: bool = False
    nt_ranks: dict[int, tuple[str, str]] = field(default_factory=dict)  # nccl-tests: rank -> (host, gpu)


def parse(path: str | os.PathLike) -> NcclLog:
    path = _check(path)
    out = NcclLog(path=path.name)
    seen = _Seen()
    for line in _lines(path):
        s = line.strip()
        m = _NT_DEVICE.match(s)
        if m:
            seen.nt_ranks[int(m["rank"])] = (m["host"], m["gpu"])
            continue
        m = _INFO.match(s)
        if not m:
            # NCCL's banner can reach the log without the host:pid:tid prefix (mpirun's
            # "[1,0]<stdout>:" tag already stripped), so read the version from any line.
            v = _VERSION.match(s) if out.version is None else None
            if v:
                out.version, out.cuda = v["v"], v["cuda"]
            continue
        seen.saw_info = True
        if m["host"] not in seen.hosts:
            seen.hosts.append(m["host"])
        if not _init_message(out, seen, m["msg"]):
            _setting_message(out, seen, m["msg"])
    _sum_up(out, seen)
    _nccl_tests(out, path)
    if not seen.saw_info and not out.nccl_tests:
        out.warnings.append(
            f"{path.name}: no NCCL INFO line and no nccl-tests table; "
            f"run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING for the tuner)"
        )
    elif not seen.saw_info:
        out.warnings.append(
            f"{path.name}: nccl-tests output without NCCL INFO lines: "
            f"version and transports unknown (set NCCL_DEBUG=INFO)"
        )
    return out


def _init_message(out: NcclLog, seen: _Seen, msg: str) -> bool:
    """The version, a communicator's init and its timings, a connection's transport; True when
    msg was one of them."""
    if out.version is None:
        v = _VERSION.search(msg)
        if v:
            out.version, out.cuda = v["v"], v["cuda"]
            return True
    v = _INIT.search(msg)
    if v:
        key = v["commid"] or v["comm"]
        c = seen.comms.setdefault(key, {"comm_id": v["commid"], "nranks": int(v["nranks"]), "ranks_seen": set()})
        c["ranks_seen"].add(int(v["rank"]))
        seen.ranks.add(int(v["rank"]))
        return True
    v = _INIT_TIMINGS.search(msg)
    if v:
        out.init_timings.append({"rank": int(v["rank"]), "nranks": int(v["nranks"]), "total_s": float(v["total"])})
        return True
    v = _VIA.search(msg)
    if v:
        via = v["via"]
        kind = via.split("/", 1)[0]
        if kind == "NET":
            parts = via.split("/")
            name = parts[1] if len(parts) > 1 else "?"
            via = f"NET/{name}"
            out.network = out.network or name
            if v["flags"] == "GDRDMA" or "GDRDMA" in msg:
                out.gdr = True
            elif out.gdr is None:
                out.gdr = False
        seen.transports[via] += 1
        return True
    return False


def _setting_message(out: NcclLog, seen: _Seen, msg: str) -> None:
    """Channels, rings, the network, NVLS and the tuner."""
    v = _CHANNELS.search(msg)
    if v:
        ch = {"coll": int(v["coll"]), "p2p": int(v["p2p"]), "p2p_per_peer": int(v["perpeer"])}
        if v["collnet"] is not None:
            ch["collnet"] = int(v["collnet"])
        if v["nvls"] is not None:
            ch["nvls"] = int(v["nvls"])
        for k, n in ch.items():
            out.channels[k] = max(out.channels.get(k, 0), n)
        return
    v = _RING.search(msg)
    if v and "coll" not in out.channels:
        out.channels["rings"] = max(out.channels.get("rings", 0), int(v["n"]))
        return
    v = _NETWORK.search(msg)
    if v:
        out.network = v["net"]
        return
    if msg.startswith("NET/IB : Using") and out.network is None:
        out.network = "IB"
    elif msg.startswith("NET/Socket : Using") and out.network is None:
        out.network = "Socket"
    if "NVLS multicast support is available" in msg or "Connected NVLS" in msg:
        out.nvls = True
    v = _TUNER_PLUGIN.search(msg)
    if v:
        out.tuner = v["t"].rstrip(".")
    elif "using internal tuner" in msg.lower():
        seen.tuner_internal = True


def _sum_up(out: NcclLog, seen: _Seen) -> None:
    """The log's figures from what its lines said: transports, communicators, ranks, hosts, GPUs."""
    if out.tuner is None and seen.tuner_internal:
        out.tuner = "internal"
    if out.channels.get("nvls"):
        out.nvls = True
    out.transports = dict(sorted(seen.transports.items(), key=lambda kv: -kv[1]))
    kinds = {t.split("/", 1)[0] for t in seen.transports}
    if out.nvls:
        kinds.add("NVLS")
    if out.channels.get("collnet") and any("CollNet" in t or "COLLNET" in t for t in seen.transports):
        kinds.add("COLLNET")
    out.transport_kinds = sorted(kinds)
    out.communicators = [
        {"comm_id": c["comm_id"], "nranks": c["nranks"], "ranks_seen": len(c["ranks_seen"])}
        for c in seen.comms.values()
    ]
    out.ranks = sorted(seen.ranks or seen.nt_ranks)
    if seen.comms:
        out.nranks = max(c["nranks"] for c in seen.comms.values())
    elif seen.nt_ranks:
        out.nranks = len(seen.nt_ranks)
    hosts_all = seen.hosts or []
    for h, _g in (seen.nt_ranks[r] for r in sorted(seen.nt_ranks)):
        if h not in hosts_all:
            hosts_all.append(h)
    out.hosts = hosts_all
    out.nodes = len(hosts_all) or None
    out.gpus = sorted({g for _h, g in seen.nt_ranks.values()})


def _nccl_tests(out: NcclLog, path: Path) -> None:
    """One summary per nccl-tests result table in the log: op, ranks, sizes, average and peak busbw."""
    curve = reference_curve(path)
    for run, g in curve.groupby("run", sort=True):
        peak = g.loc[g["busbw_GBps"].idxmax()]
        out.nccl_tests.append(
            {
                "run": int(run),
                "op": g["op"].iloc[0],
                "ranks": _int_or_none(g["ranks"].iloc[0]),
                "dtype": g["dtype"].iloc[0],
                "sizes": int(len(g)),
                "min_bytes": int(g["bytes"].min()),
                "max_bytes": int(g["bytes"].max()),
                "avg_busbw_GBps": _float_or_none(g["avg_busbw_GBps"].iloc[0]),
                "peak_busbw_GBps": float(peak["busbw_GBps"]),
                "peak_at_bytes": int(peak["bytes"]),
            }
        )


def _int_or_none(v):
    return None if v is None or pd.isna(v) else int(v)


def _float_or_none(v):
    return None if v is None or pd.isna(v) else float(v)


def _num(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None  # "N/A"


_CURVE_COLUMNS = [
    "run",
    "op",
    "bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "wrong",
    "time_us_inplace",
    "algbw_GBps_inplace",
    "busbw_GBps_inplace",
    "ranks",
    "avg_busbw_GBps",
]


def _guess_op(redop: str, root: int) -> str:
    # what the table alone says (nccl-tests prints the same columns for every test)
    if redop == "none":
        return "broadcast" if root >= 0 else "all_gather"
    return "reduce" if root >= 0 else "all_reduce"


def reference_curve(path: str | os.PathLike, op: str | None = None) -> pd.DataFrame:
    """nccl-tests result tables -> DataFrame(op, bytes, busbw_GBps, algbw_GBps, time_us, ...).

    One row per message size of every table (``run`` numbers the tables in the file). Columns
    without suffix are nccl-tests' out-of-place results, ``*_inplace`` the in-place ones. ``op`` is
    the test's collective: from the binary's name when the log shows the command line
    (``all_reduce_perf``), else the ``op`` argument, else guessed from redop/root (sum/-1 reads as
    all_reduce, which reduce_scatter_perf also prints: pass op= for those)."""
    path = _check(path)
    rows: list[dict] = []
    run = -1
    in_table = False
    binary_op = None
    nt_ranks: set[int] = set()
    ranks_per_run: dict[int, int | None] = {}
    avg: dict[int, float] = {}
    for line in _lines(path):
        s = line.strip()
        b = _NT_BINARY.search(s)
        if b and not s.startswith("#"):
            binary_op = _BINARY_OPS[b["op"]]
        if _NT_HEADER.match(s):
            nt_ranks = set()
            in_table = False
            continue
        m = _NT_DEVICE.match(s)
        if m:
            nt_ranks.add(int(m["rank"]))
            continue
        if _NT_COLUMNS.match(s):
            run += 1
            in_table = True
            ranks_per_run[run] = len(nt_ranks) or None
            continue
        m = _NT_AVG.match(s)
        if m and run >= 0:
            avg[run] = float(m["v"])
            in_table = False
            continue
        if not in_table or s.startswith("#"):
            continue
        m = _NT_ROW.match(s)
        if not m:
            continue
        rest = m["rest"].split()
        if len(rest) < 4:
            continue
        redop, root = m["redop"], int(m["root"])
        row = {
            "run": run,
            "op": op or binary_op or _guess_op(redop, root),
            "bytes": int(m["size"]),
            "count": int(m["count"]),
            "dtype": m["type"],
            "redop": redop,
            "root": root,
            "time_us": _num(rest[0]),
            "algbw_GBps": _num(rest[1]),
            "busbw_GBps": _num(rest[2]),
            "wrong": _num(rest[3]),
            "time_us_inplace": None,
            "algbw_GBps_inplace": None,
            "busbw_GBps_inplace": None,
            "ranks": ranks_per_run.get(run),
        }
        if len(rest) >= 7:
            row.update(
                time_us_inplace=_num(rest[4]), algbw_GBps_inplace=_num(rest[5]), busbw_GBps_inplace=_num(rest[6])
            )
        rows.append(row)
    df = pd.DataFrame(rows, columns=_CURVE_COLUMNS[:-1])
    df["avg_busbw_GBps"] = df["run"].map(avg)
    for c in (
        "time_us",
        "algbw_GBps",
        "busbw_GBps",
        "time_us_inplace",
        "algbw_GBps_inplace",
        "busbw_GBps_inplace",
        "avg_busbw_GBps",
    ):
        df[c] = df[c].astype("float64")
    df["ranks"] = df["ranks"].astype("Int64")
    return df[_CURVE_COLUMNS]
