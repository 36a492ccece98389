"""Parallelism dimensions: which communicator is data, tensor, pipeline, expert or
context parallel, and the communication, waiting and exposed time of each.

A label is taken, in this order, from:
1. the group's description as torch gives it (DeviceMesh names its groups ``mesh_<dim>``; the
   wrapper records it once per group): a dimension name containing dp/data/replicate/shard(fsdp)
   is dp, tp/tensor/model is tp, pp/pipe/stage is pp, ep/expert/moe is ep, cp/context/seq is cp;
2. the default group of every rank: world;
3. point-to-point traffic on the group (pipeline stages pass activations): pp;
4. membership: a group of consecutive ranks is tp when the job also has strided groups, a group
   of ranks a fixed stride apart is dp (Megatron's and DeviceMesh's row-major layout: the
   innermost, fastest dimension is contiguous);
otherwise unknown. Where only the pattern speaks, the JSON says so in `source`.
"""

from __future__ import annotations

import re

import duckdb
import pandas as pd

from nsyscomm import duck

DIMENSIONS = ("dp", "tp", "pp", "ep", "cp", "world", "unknown")
_NAMES = [
    ("dp", r"(^|[_\W])(dp|data|replicate|ddp|fsdp|shard|dp_shard|dp_replicate)($|[_\W])"),
    ("tp", r"(^|[_\W])(tp|tensor|model|mp)($|[_\W])"),
    ("pp", r"(^|[_\W])(pp|pipe|pipeline|stage)($|[_\W])"),
    ("ep", r"(^|[_\W])(ep|expert|experts|moe)($|[_\W])"),
    ("cp", r"(^|[_\W])(cp|context|seq|sp)($|[_\W])"),
]


def from_name(desc: object) -> str | None:
    if not isinstance(desc, str) or not desc:
        return None
    d = desc.lower().removeprefix("mesh_")
    for dim, pat in _NAMES:
        if re.search(pat, d):
            return dim
    return None


def _ranks(row) -> list[int]:
    text = row.group_ranks if isinstance(row.group_ranks, str) and row.group_ranks else row.ranks_seen
    return [int(x) for x in str(text or "").replace(";", ",").split(",") if x.strip().lstrip("-").isdigit()]


def dimensions(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per communicator: group, dimension, source (name/world/p2p/pattern/none),
    group_size, ranks, comm_ms, wait_ms, exposed_ms."""
    df = duck.frame(con.execute(duck.sql("dimensions")))
    cols = ["group", "dimension", "source", "group_size", "ranks", "comm_ms", "wait_ms", "exposed_ms"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    world = int(duck.scalar(con, "SELECT count(DISTINCT rank) FROM collectives"))
    rows = []
    ranks_of = {r.group: _ranks(r) for r in df.itertuples()}
    strided_any = any(len(r) > 1 and r[1] - r[0] > 1 and _even(r) for r in ranks_of.values())
    for r in df.itertuples():
        ranks = ranks_of[r.group]
        dim, source = from_name(r.desc), "name"
        if dim is None:
            size = int(r.group_size) if not pd.isna(r.group_size) else len(ranks)
            if size >= world > 1 and not r.p2p:
                dim, source = "world", "world"
            elif r.p2p and not r.collectives:
                dim, source = "pp", "p2p"
            elif len(ranks) > 1 and _even(ranks):
                step = ranks[1] - ranks[0]
                dim, source = (
                    ("tp", "pattern")
                    if step == 1 and strided_any
                    else ("dp", "pattern")
                    if step > 1
                    else ("unknown", "none")
                )
            else:
                dim, source = "unknown", "none"
        rows.append(
            (
                r.group,
                dim,
                source,
                None if pd.isna(r.group_size) else int(r.group_size),
                ",".join(map(str, ranks)),
                r.comm_ms,
                r.wait_ms,
                r.exposed_ms,
            )
        )
    return pd.DataFrame(rows, columns=cols)


def _even(ranks: list[int]) -> bool:
    """Ranks a fixed distance apart (0,1,2,3 or 0,4,8,12)."""
    return len(ranks) > 1 and len({b - a for a, b in zip(ranks, ranks[1:])}) == 1
