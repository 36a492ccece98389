"""The device time of calls that launched no NCCL kernel in a PyTorch profiler (Kineto) trace.

On a one-rank communicator NCCL launches no kernel: an out-of-place call (all_gather, torch's
reduce_scatter_tensor) is one device-to-device copy on the call's stream, as on nsys exports
(sql/copies_nsys.sql, docs/architecture.md "Facts about NCCL"). A copy belongs to a call when its
launching runtime call (``cudaMemcpyAsync``, the same ``correlation``) ran inside the call's host
range on the same thread. Only device-to-device copies are the call's: NCCL's communicator
initialization, inside the first call, copies host to device on a stream of its own, and a Kineto
trace has no NVTX range that would tell those apart (nsys's ``ncclCommInitRank*``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import NamedTuple

from nsyscomm.ingest.kineto.meta import int_or_none


class Copy(NamedTuple):
    start: int
    end: int
    correlation: object
    device: int | None
    stream: int | None


def is_call_copy(name: str) -> bool:
    """A device-to-device copy (Kineto names them ``Memcpy DtoD (Device -> Device)``)."""
    return "DtoD" in name


def make(ts: int, end: int, args: dict) -> Copy:
    return Copy(ts, end, args.get("correlation"), int_or_none(args.get("device")), int_or_none(args.get("stream")))


def apply(rows: list[dict], copies: list[Copy], launches: dict) -> None:
    """Give the rows without kernels the device span of the copies launched inside their host
    range on their thread (gpu_start, gpu_end, device, stream); kernels stays 0."""
    if not copies:
        return
    by_thread: dict[tuple, list[tuple[int, Copy]]] = defaultdict(list)
    for c in copies:
        launch = launches.get(c.correlation)
        if launch is not None:
            by_thread[(launch.pid, launch.tid)].append((launch.start, c))
    for lst in by_thread.values():
        lst.sort(key=lambda x: x[0])
    starts = {k: [t for t, _c in v] for k, v in by_thread.items()}
    for row in rows:
        if row.get("gpu_start") is not None or row.get("cpu_start") is None or row.get("cpu_end") is None:
            continue
        key = (row.get("pid"), row.get("tid"))
        if key not in by_thread:
            continue
        lo = bisect.bisect_left(starts[key], row["cpu_start"])
        hi = bisect.bisect_right(starts[key], row["cpu_end"])
        owned = [c for _t, c in by_thread[key][lo:hi]]
        if not owned:
            continue
        first = min(owned, key=lambda c: c.start)
        row.update(
            gpu_start=first.start,
            gpu_end=max(c.end for c in owned),
            device=first.device,
            stream=first.stream,
        )
