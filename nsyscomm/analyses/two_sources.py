"""One job described by two sources (an nsys export and NCCL Inspector dumps, a PyTorch profiler
trace and Flight Recorder dumps): where their calls disagree, per rank, in counts, message sizes
and order. The first source is the job's Result; the other is compared with it, call for call
as each recorded them (docs/sources.md, "One job, two sources")."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from nsyscomm.analyses.result import Result

_MAX_LINES = 8  # per disagreement kind: the rest counted


def _size(v: float | int | None) -> str:
    if v is None or v != v:
        return "size unknown"
    b = int(v)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def _procs(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """How a process is told in both: by host and pid where both sources name the same processes
    so (a rank number can differ: Inspector dumps without a world communicator number their ranks
    by host and pid), else by its rank. Returns the key column."""
    keys = [set(zip(c["host"].astype(str), c["pid"].astype("Int64"))) for c in (a, b)]
    if keys[0] == keys[1] and all(c["host"].notna().all() and c["pid"].notna().all() for c in (a, b)):
        return "proc"
    return "rank"


def _key(c: pd.DataFrame) -> pd.Series:
    return c["op"].astype(str) + " " + c["bytes"].map(_size)


def compare(first: Result, second: Result, names: tuple[str, str]) -> tuple[int, list[str]]:
    """The calls the two sources agree on (op and size, per process), and lines saying where the
    second source's calls differ from the first's: per rank, the calls (by op and size) one holds
    and the other lacks, and the first call where their orders part."""
    a, b = first.collectives, second.collectives
    key = _procs(a, b)
    for c in (a, b):
        c["proc"] = c["host"].astype(str) + ":" + c["pid"].astype(str)
    rank_of = a.groupby(key)["rank"].first().to_dict()
    out: list[str] = []
    counts: list[str] = []
    order: list[str] = []
    agree = 0
    for proc in sorted(set(a[key].dropna()) | set(b[key].dropna()), key=lambda p: (rank_of.get(p, 1 << 30), str(p))):
        rank = rank_of.get(proc, proc)
        ra = a[a[key] == proc].sort_values(["exec_start", "cpu_start"])
        rb = b[b[key] == proc].sort_values(["exec_start", "cpu_start"])
        ka, kb = Counter(_key(ra)), Counter(_key(rb))
        for k in sorted(set(ka) | set(kb)):
            if ka[k] != kb[k]:
                counts.append(f"rank {rank} {k}: {ka[k]} in {names[0]}, {kb[k]} in {names[1]}")
        # the order, over the calls both hold: the first place they part
        both = set(ka) & set(kb)
        sa = [k for k in _key(ra) if k in both]
        sb = [k for k in _key(rb) if k in both]
        at = next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), None)
        if at is not None:
            order.append(f"rank {rank}: call {at + 1} is {sa[at]} in {names[0]}, {sb[at]} in {names[1]}")
        agree += sum(min(ka[k], kb[k]) for k in both)
    if counts or order:
        out.append(
            f"{names[0]} and {names[1]} describe the same job: {agree} call(s) agree in op and size; "
            f"they disagree below (the summary is {names[0]}'s)"
        )
    else:
        out.append(
            f"{names[0]} and {names[1]} describe the same job and agree on all {agree} call(s) in op, size and order"
        )
    for kind, lines in (("counts", counts), ("order", order)):
        out += [f"  {kind}: {line}" for line in lines[:_MAX_LINES]]
        if len(lines) > _MAX_LINES:
            out.append(f"  {kind}: {len(lines) - _MAX_LINES} more")
    return agree, out
