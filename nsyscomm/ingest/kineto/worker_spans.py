"""The execution span of asynchronous calls in PyTorch profiler (Kineto) traces.

Under torch.profiler the wrapper's range around an asynchronous call (``async=1`` in its message:
``async_op=True``, isend/irecv, DDP's buckets, functional collectives) is only the enqueue. A
backend without kernels records its own range for the work where it runs it: gloo's
``gloo:all_reduce`` and the like on its worker threads (point-to-point ones in the caller's
wait). Those ranges carry no group or sequence number, so they are paired with the calls in
order, per process and op: the events that lie inside a synchronous call's range are that call's
own work (an object collective runs several), the others are the asynchronous calls', which the
backend runs in the order they were enqueued. Where the counts differ, or an event would start
before its call, nothing is paired for that op (the calls keep their enqueue, and a warning says
so): a wrong pairing would be worse than none.
"""

from __future__ import annotations

from collections import defaultdict

from nsyscomm import nvtx_format
from nsyscomm.ingest.names import canonical_op


def apply(rows: list[dict], wrappers: list, ranges: list, owned: dict, warnings: list[str], report: str) -> None:
    """Set exec_start/exec_end on rows (the wrapper ranges' rows, in the order of wrappers) of
    asynchronous calls without kernels, from the backend ranges (ranges without kernels: owned
    maps id(range) to its kernels)."""
    sync_spans: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    calls: dict[tuple, list[dict]] = defaultdict(list)
    for w, row in zip(wrappers, rows):
        if row.get("gpu_start") is not None or row.get("op") is None:
            continue
        key = (w.pid, row["op"])
        if nvtx_format.parse(w.name).get("async") == "1":
            calls[key].append(row)
        else:
            sync_spans[key].append((w.start, w.end))
    if not calls:
        return
    events: dict[tuple, list] = defaultdict(list)
    for r in ranges:
        if owned.get(id(r)) or r.name.startswith("nccl:"):
            continue
        key = (r.pid, canonical_op(r.name.split(",", 1)[0].strip()))
        if key in calls and not any(s <= r.start and r.end <= e for s, e in sync_spans.get(key, ())):
            events[key].append(r)
    unpaired = 0
    for key, cs in calls.items():
        cs.sort(key=lambda c: c["cpu_start"])
        es = sorted(events.get(key, ()), key=lambda r: r.start)
        if len(es) != len(cs) or any(e.start < c["cpu_start"] for c, e in zip(cs, es)):
            unpaired += len(cs)
            continue
        for c, e in zip(cs, es):
            c["exec_start"] = e.start
            c["exec_end"] = max(e.end, e.start)
    if unpaired:
        warnings.append(
            f"{report}: {unpaired} asynchronous call(s) could not be paired with the backend's own ranges "
            f"(gloo:* on its threads); they are timed by their enqueue"
        )
