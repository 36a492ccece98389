"""The edge of the Kineto trace format (issue 35), beside the per-event checks of
nsyscomm.ingest.limits.checked_events: the events a reader keeps against the memory budget, the
trace's distributedInfo, and the numbers of its calls against 64 bits, so that nothing past
nsyscomm.ingest.kineto sees an infinite rank or a size no column holds. The limits are stated in
docs/limits.md."""

from __future__ import annotations

from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest import limits

# Memory one kept event costs until the calls are made (docs/limits.md): an NCCL kernel, CPU
# range or record_param_comms with its args and its row; a compute kernel or a launch
KEPT_BYTES, SMALL_BYTES = 4096, 512


def check_budget(
    path: Path,
    kernels: list,
    ranges: list,
    params: list,
    wrappers: list,
    rank_marks: list,
    compute: list,
    launches: dict,
) -> None:
    """An InputError when the events kept so far would not fit in the memory budget."""
    kept = len(kernels) + len(ranges) + len(params) + len(wrappers) + len(rank_marks)
    small = len(compute) + len(launches)
    cost = kept * KEPT_BYTES + small * SMALL_BYTES
    err = limits.over_budget(path, "bytes of kernels, launches and ranges to hold", cost, 1)
    if err:
        raise err


def distributed_info(path: Path, dist: object) -> dict:
    """The trace's distributedInfo, checked: an object whose rank and world_size, where given, are
    integers a job may have."""
    if dist is None:
        return {}
    if not isinstance(dist, dict):
        raise InputError(
            f"{path}: distributedInfo is {type(dist).__name__}, not an object; pass the trace as the "
            f"PyTorch profiler wrote it (prof.export_chrome_trace)"
        )
    for key, lo in (("rank", 0), ("world_size", 1)):
        v = dist.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= limits.MAX_GROUP:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "…"
            raise InputError(
                f"{path}: distributedInfo.{key} is {shown}, not an integer from {lo} to {limits.MAX_GROUP}; "
                f"pass the trace as the PyTorch profiler wrote it (prof.export_chrome_trace)"
            )
    return dist


_INT_FIELDS = ("pid", "tid", "bytes", "numel", "group_size", "seq", "step", "peer", "stream", "device")


def check_int64(path: Path, rows: list[dict]) -> None:
    """An InputError for a number in the rows that no 64-bit column holds (a message size made
    from counts of trillions): the table below is typed."""
    for r in rows:
        for f in _INT_FIELDS:
            v = r.get(f)
            if isinstance(v, int) and not -(1 << 63) <= v < 1 << 63:
                raise InputError(
                    f"{path}: a call with {f} of {len(str(v))} digits, past 64 bits; pass the trace as "
                    f"the PyTorch profiler wrote it (prof.export_chrome_trace)"
                )
