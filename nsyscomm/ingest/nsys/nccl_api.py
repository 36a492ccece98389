"""NCCL's API as its NVTX ranges show it: the range names and payload entry names NCCL uses, the
canonical op of each, reduction ops, the payload's size as nccl-tests counts it, and the group
semantics that make ranges into units (one per ungrouped call, or per outermost
ncclGroupStart/ncclGroupEnd on a thread). Facts in docs/architecture.md, "Facts about NCCL".
"""

from __future__ import annotations

from collections import Counter
from typing import Any, SupportsInt

import pandas as pd

from nsyscomm.ingest.nsys.nvtx_payload import SCHEMA_BASE

# stable since 2.19 (docs/architecture.md, "Facts about NCCL"); used only when a range's name is not an NCCL API name
SCHEMA_OPS = {4: "AllGather", 5: "AllReduce", 6: "Broadcast", 7: "ReduceScatter", 8: "Reduce", 9: "Send", 10: "Recv"}

SCHEMA_OPS_228 = {16: "AlltoAll", 17: "Gather", 18: "Scatter"}

# NCCL API (range name without "nccl") -> canonical op
API_OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Bcast": "broadcast",
    "Reduce": "reduce",
    "Send": "send",
    "Recv": "recv",
    "AlltoAll": "all_to_all",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}

INIT_APIS = (
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommSplit",
    "ncclCommInitAll",
    "ncclCommGrow",
)

REDOPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}

# entry name -> field of a decoded payload
ENTRY_FIELDS = {
    "nccl communicator id": "comm",
    "message size [bytes]": "msg_bytes",
    "reduction operation": "redop",
    "root": "root",
    "peer rank": "peer",
    "no. of ranks": "nranks",
    "rank": "rank",
    "cuda device": "device",
    "no. of devices": "ndev",
    # nsys's NCCL tracing (--trace=nccl, nsys 2025.6+, NCCL 2.28+), as its recipe tables name the
    # values (NCCL_GPU_OPERATIONS_COLLECTIVE: commHash, seqNumber): the communicator, and NCCL's
    # sequence number of the call in it, the same on every rank
    "commhash": "comm",
    "comm hash": "comm",
    "seqnumber": "seq",
    "seq number": "seq",
    "sequence number": "seq",
}


def json_value(key: str, v: Any) -> Any:
    """A JSON payload value as the binary one reads: reduction ops by NCCL's names, numbers from text."""
    if key == "redop" and isinstance(v, str):
        low = v.strip().lower()
        return {"product": "prod"}.get(low, low)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return v
    return v


def redop_name(v: str | SupportsInt | None) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    return REDOPS.get(int(v), f"premulsum{int(v)}" if int(v) >= 5 else str(v))


def api_op(name: str | None, schema_id: int | None = None) -> str | None:
    if name and name.startswith("nccl"):
        return API_OPS.get(name[4:])
    if schema_id is not None:
        k = schema_id - SCHEMA_BASE
        return API_OPS.get(SCHEMA_OPS.get(k) or SCHEMA_OPS_228.get(k, ""))
    return None


def nccl_tests_bytes(op: str | None, msg_bytes: SupportsInt | None, nranks: SupportsInt | None) -> int | None:
    """NCCL's payload size -> nccl-tests S (docs/architecture.md, "Message size and bus bandwidth"): all_gather / reduce_scatter / gather / scatter
    carry the per-rank size: S = n x that (None when n is unknown); the others are S already."""
    if msg_bytes is None or op is None:
        return None
    if op in ("all_gather", "reduce_scatter", "gather", "scatter"):
        return int(msg_bytes) * int(nranks) if nranks else None
    return int(msg_bytes)


def build_units(events: pd.DataFrame, comm_sizes: dict) -> pd.DataFrame:
    """NCCL ranges of one report (globalTid, start, end, name, fields...) -> one row per unit:
    globalTid, start, end (the interval whose launches are its kernels), op, api, bytes, group,
    group_size, members. ``comm_sizes``: comm id -> nranks (from the init payloads)."""
    rows = []
    for gtid, ev in events.sort_values(["globalTid", "start", "end"]).groupby("globalTid", sort=False):
        depth = 0
        members: list = []
        for e in ev.itertuples(index=False):
            if e.name == "ncclGroupStart":
                if depth == 0:
                    members = []
                depth += 1
            elif e.name == "ncclGroupEnd":
                if depth == 0:
                    continue  # its ncclGroupStart is outside the capture window
                depth -= 1
                if depth == 0 and members:
                    rows.append(_unit(gtid, e.start, e.end, members, comm_sizes, grouped=True))
            elif api_op(e.name) is not None:
                if depth > 0:
                    members.append(e)
                else:
                    rows.append(_unit(gtid, e.start, e.end, [e], comm_sizes, grouped=False))
    cols = ["globalTid", "start", "end", "op", "api", "bytes", "group", "group_size", "redop", "members", "seq"]
    return pd.DataFrame(rows, columns=cols)


def _unit(gtid, start, end, members, comm_sizes, grouped: bool) -> dict:
    ops = [api_op(m.name) for m in members]
    comms = {m.comm for m in members if present(m.comm)}
    comm = next(iter(comms)) if len(comms) == 1 else None
    n = comm_sizes.get(comm) if comm is not None else None
    # most often first, ties in the order met (pandas' value_counts, a thousand times its cost per unit)
    names = Counter(m.name for m in members).most_common()
    api = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in names)
    if grouped:
        api = f"ncclGroupEnd({api})"
    redops = {redop_name(m.redop) for m in members if present(m.redop)}
    if set(ops) <= {"send", "recv"}:
        send_b = sum(int(m.msg_bytes) for m, o in zip(members, ops) if o == "send" and present(m.msg_bytes))
        recv_b = sum(int(m.msg_bytes) for m, o in zip(members, ops) if o == "recv" and present(m.msg_bytes))
        peers_s = {int(m.peer) for m, o in zip(members, ops) if o == "send" and present(m.peer)}
        peers_r = {int(m.peer) for m, o in zip(members, ops) if o == "recv" and present(m.peer)}
        if not peers_s and not peers_r and not any(present(m.msg_bytes) for m in members):
            op = None  # no payload: the kernels (or the enclosing PyTorch range) tell
            nbytes = None
        elif (n and n > 1 and len(peers_s) >= n - 1 and len(peers_r) >= n - 1) or (
            not n and len(peers_s) >= 2 and peers_s == peers_r
        ):
            op, nbytes = "all_to_all", send_b
        elif "send" in ops:
            op, nbytes = "send", send_b  # a send (paired with receives in a sendrecv group)
        else:
            op, nbytes = "recv", recv_b
        if op is not None and not any(present(m.msg_bytes) for m in members):
            nbytes = None
    elif len(set(ops)) == 1:
        op = ops[0]
        parts = [nccl_tests_bytes(op, m.msg_bytes if present(m.msg_bytes) else None, n) for m in members]
        nbytes = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
    else:
        op, nbytes = None, None  # mixed collectives in one group: the kernels tell
    # NCCL's own sequence number (nsys's NCCL tracing) keys one collective on every rank exactly;
    # a unit of several calls has several, and is matched by order
    first = getattr(members[0], "seq", None)
    seq = None
    if len(members) == 1 and first is not None and present(first) and op not in ("send", "recv", "all_to_all"):
        seq = int(first)
    return {
        "globalTid": gtid,
        "start": start,
        "end": end,
        "op": op,
        "api": api,
        "bytes": nbytes,
        "group": None if comm is None else str(comm),
        "group_size": n,
        "redop": ",".join(sorted(r for r in redops if r)) or None,
        "members": len(members),
        "seq": seq,
    }


def present(v: object) -> bool:
    """A value a payload carries: not None, NaN or pandas' NA."""
    return v is not None and not (isinstance(v, float) and v != v) and v is not pd.NA
