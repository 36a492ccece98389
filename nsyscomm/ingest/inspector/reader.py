"""One NCCL Inspector dump -> an Extract: one row per recorded call, in the collectives table's
columns (docs/sources.md, "NCCL Inspector dumps").

Matching across ranks needs no call order: a collective is its communicator (``header.id``), its
op and its sequence number (``coll_sn``, which NCCL counts per communicator and function); a
point-to-point call pairs by the messages' order per direction (sql/collectives.sql), its peer
translated from the communicator's rank to the global one.

Times (docs/architecture.md, "Timing model"): with verbose timestamps the launch is the call's
start and stop as the plugin saw them on the host, and the execution starts at its first
channel's kernel start and lasts the plugin's own execution time (the longest channel's GPU
time, whole microseconds). Without them no time of any call is known: each call is placed at its
sequence number's second on every rank alike, so that counts, sizes, latencies and bandwidths
stay right, and one line says what cannot be computed (arrival skew, lateness, wait, overlap)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from nsyscomm import schema
from nsyscomm.ingest.inspector import folder as dump_folder
from nsyscomm.ingest.inspector.records import FUNCS, TIMING_GPU, Record

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

SOURCE = "nccl_inspector"
# the made-up timeline of dumps without timestamps: one call per second of its sequence number
_PLACED_NS = 1_000_000_000


def _group_ranks(members: dict[int, int], n: int) -> str:
    """The communicator's global ranks in its own rank order; empty unless every member wrote a
    record (the others' global ranks are unknown)."""
    if len(members) < n:
        return ""
    return ",".join(str(members[i]) for i in range(n))


def _times(r: Record, placed: int) -> dict[str, int | None]:
    dur = r.exec_us * 1000
    if r.start_us is None:  # no timestamps: the made-up timeline
        return {"cpu_start": placed, "cpu_end": placed, "exec_start": placed, "exec_end": placed + dur}
    cpu_start = r.start_us * 1000
    cpu_end = max(cpu_start, (r.stop_us or r.start_us) * 1000)
    on_gpu = r.kernel_start_us is not None and r.timing.startswith("kernel")
    start = r.kernel_start_us * 1000 if on_gpu and r.kernel_start_us is not None else cpu_start
    times: dict[str, int | None] = {"cpu_start": cpu_start, "cpu_end": cpu_end, "exec_start": start}
    times["exec_end"] = start + dur
    times["gpu_start"], times["gpu_end"] = (start, start + dur) if on_gpu else (None, None)
    return times


def rows(path: Path) -> tuple[list[dict], list[str]]:
    """The dump's calls as collectives rows, and what the folder's first dump says of them all."""
    path = Path(path).resolve()
    f = dump_folder.folder_of(path)
    d = f.dumps[path]
    messages: defaultdict[tuple[str, str, int], int] = defaultdict(int)  # (comm, func, peer) -> count so far
    out = []
    for r in sorted(d.records, key=lambda r: (r.comm.id, r.p2p, r.func, r.sn)):
        op, whole = FUNCS[r.func]
        n = r.comm.n_ranks
        members = f.members.get(r.comm.id, {})
        peer = members.get(r.peer) if r.peer is not None else None
        group = r.comm.id
        if r.p2p:
            sender, receiver = (r.comm.rank, r.peer) if r.func == "Send" else (r.peer, r.comm.rank)
            k = (r.comm.id, r.func, r.peer or 0)
            placed = (messages[k] + 1) * _PLACED_NS
            messages[k] += 1
            if (r.comm.id, sender, receiver) in f.unpaired:
                # never paired with a call of another rank: a group of its own
                group, peer = f"{r.comm.id}/unpaired/{d.host}:{d.pid}", None
        else:
            placed = (r.sn + 1) * _PLACED_NS
        out.append(
            {
                "pid": d.pid,
                "op": op,
                "api": f"nccl{r.func}",
                "bytes": r.msg_bytes * n if whole else r.msg_bytes,
                "group": group,
                "group_size": n,
                "group_ranks": _group_ranks(members, n),
                "seq": r.sn,
                "source": SOURCE,
                "algo": r.algo,
                "proto": r.proto,
                "kernels": 1 if r.kernel_start_us is not None else None,
                "kernel_ns": r.exec_us * 1000,
                "peer": peer,
                **_times(r, placed),
            }
        )
    return out, (_folder_lines(f) if path == f.first else []) + _dump_lines(d)


def _folder_lines(f: dump_folder.Folder) -> list[str]:
    lines = []
    if f.world is None and len(f.dumps) > 1:
        who = ", ".join(f"{f.rank[p]}={d.host}:{d.pid}" for p, d in sorted(f.dumps.items(), key=lambda x: f.rank[x[0]]))
        lines.append(f"NCCL Inspector dumps: no world communicator recorded; ranks by host:pid: {who}")
    if any(r.start_us is None for d in f.dumps.values() for r in d.records):
        lines.append(
            "NCCL Inspector dumps without verbose timestamps (NCCL_INSPECTOR_DUMP_VERBOSE=1): calls placed "
            "by sequence number; arrival skew, lateness, stragglers, wait, overlap and the what-if cannot be computed"
        )
    missing = sum(f.missing.values())
    if missing:
        by = ", ".join(f"rank {f.rank[p]}: {n}" for p, n in sorted(f.missing.items(), key=lambda x: f.rank[x[0]]))
        lines.append(
            f"NCCL Inspector dumps: {missing} collective record(s) other ranks have are missing ({by}): "
            f"dropped by the plugin's ring (raise NCCL_INSPECTOR_DUMP_COLL_RING_SIZE) or timed on the host; "
            f"those collectives are seen on fewer ranks, never matched to other calls"
        )
    if f.unpaired_calls:
        lines.append(
            f"NCCL Inspector dumps: {f.unpaired_calls} point-to-point call(s) left unpaired: their two sides "
            f"recorded different counts (records dropped by the plugin)"
        )
    return lines


def _dump_lines(d: dump_folder.Dump) -> list[str]:
    name = d.path.name
    lines = []
    if d.dropped:
        lines.append(f"{name}: the plugin dropped {d.dropped} record(s) from its ring (its dump_stats)")
    host_timed = sum(1 for r in d.records if r.timing != TIMING_GPU)
    if host_timed:
        lines.append(
            f"{name}: {host_timed} record(s) timed on the host (kernel_cpu / collective_cpu), not by the GPU: "
            f"their durations include the host's delays"
        )
    if d.skipped:
        what = ", ".join(f"{k} x{v}" for k, v in sorted(d.skipped.items()))
        lines.append(f"{name}: record(s) of an unknown function skipped: {what}")
    return lines


def extract(path: Path, report: str | None = None) -> Extract:
    """One dump -> an Extract (one process) for combine."""
    from nsyscomm.ingest.extract_type import Extract

    path = Path(path)
    rs, warnings = rows(path)
    f = dump_folder.folder_of(path)
    d = f.dumps[path.resolve()]
    cols = [c for c in schema.COLUMN_NAMES if c not in ("report", "rank", "local_rank", "host")]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rs], columns=cols)
    types = schema.arrow_types()
    calls = pa.Table.from_pandas(df, schema=pa.schema([(c, types[c]) for c in cols]), preserve_index=False)
    world = next((r.comm.n_ranks for r in d.records if r.comm.id == f.world), None)
    markers = pd.DataFrame(
        [{"pid": d.pid, "rank": f.rank[path.resolve()], "local_rank": None, "world": world, "host": d.host}]
    )
    starts = [r["cpu_start"] for r in rs]
    ends = [max(r["cpu_end"], r["exec_end"]) for r in rs]
    spans = pd.DataFrame([{"pid": d.pid, "first_ns": min(starts, default=0), "last_ns": max(ends, default=0)}])
    return Extract(
        report=report or path.name,
        path=path,
        calls=calls,
        markers=markers,
        spans=spans,
        warnings=warnings,
        nsys_version=f"NCCL Inspector {d.version}",
    )
