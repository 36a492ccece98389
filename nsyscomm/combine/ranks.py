"""Rank assignment: each (report, process) of a job gets its rank, from the wrapper's marker or,
without one, in process order; a rank claimed twice is renumbered, loudly."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from nsyscomm.ingest.extract_type import Extract

# (report, pid, rank, local_rank, host) of a process that made calls
RankRow = tuple[str, int, int, "int | None", "str | None"]
# the same before its rank is known: (report, pid, local_rank, host)
UnrankedRow = tuple[str, int, "int | None", "str | None"]


def assign_ranks(extracts: Sequence[Extract], called_pids: dict[str, set[int]]) -> tuple[pd.DataFrame, list[str]]:
    """(report, pid) -> rank: the wrapper's marker, else process order across the job.
    called_pids: per report, the processes that made calls (JobCalls.pids)."""
    warnings: list[str] = []
    rows: list[RankRow] = []
    unmarked: list[UnrankedRow] = []
    for e in extracts:
        marked: dict[int, tuple[int, int | None, str | None]] = {}
        m = e.markers  # columns, not itertuples(), which is slow on many reports
        for pid, rank, local_rank, host in zip(
            m["pid"].tolist(), m["rank"].tolist(), m["local_rank"].tolist(), m["host"].tolist()
        ):
            if pd.notna(rank):
                marked[int(pid)] = (int(rank), None if pd.isna(local_rank) else int(local_rank), host)
        called = called_pids.get(e.report, set())
        pids = sorted(called | set(marked))
        for pid in pids:
            if pid in marked:
                rows.append((e.report, pid, *marked[pid]))
            elif pid in called:
                unmarked.append((e.report, pid, None, None))
    # a rank claimed twice (two jobs' reports mixed, a restarted process) would merge two processes'
    # calls into one rank: the first claimant keeps it, the others get free numbers, loudly
    seen: set[int] = set()
    kept: list[RankRow] = []
    clashes: list[RankRow] = []
    for r in rows:
        (clashes if r[2] in seen else kept).append(r)
        seen.add(r[2])
    if clashes:
        who = ", ".join(f"{r[0]}:{r[1]}" for r in clashes)
        warnings.append(
            f"rank(s) {sorted({r[2] for r in clashes})} claimed by several processes; "
            f"renumbered: {who} (are these reports from one job?)"
        )
        # a renumbered process keeps its host and local rank: only its rank clashed
        unmarked += [(r[0], r[1], r[3], r[4]) for r in clashes]
        rows = kept
    taken = {r[2] for r in rows}
    if unmarked:
        nxt = 0
        for report, pid, local_rank, host in unmarked:  # already in (report order, pid) order
            while nxt in taken:
                nxt += 1
            rows.append((report, pid, nxt, local_rank, host))
            taken.add(nxt)
        if len(unmarked) > len(clashes):
            warnings.append(
                f"{len(unmarked) - len(clashes)} process(es) carry no nsyscomm rank marker: "
                f"ranks assigned in process order (report, pid)"
            )
    return pd.DataFrame(rows, columns=["report", "pid", "rank", "local_rank", "host"]), warnings
