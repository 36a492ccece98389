"""The edge of the Kineto trace format, beside the per-event checks of
nsyscomm.ingest.limits.checked_events: the events a reader keeps against the memory budget, the
trace's distributedInfo, and the numbers of its calls against 64 bits, so that nothing past
nsyscomm.ingest.kineto.trace sees an infinite rank or a size no column holds. The limits are stated in
docs/limits.md."""

from __future__ import annotations

from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.kineto.meta import META_KEYS

# Memory one kept event costs until the calls are made (docs/limits.md): an NCCL kernel, CPU
# range or record_param_comms with its args (slim_args) and its row; a compute kernel or a launch
KEPT_BYTES, SMALL_BYTES = 4096, 256
# the args the reader uses of a kept event (nsyscomm.ingest.kineto.trace, kineto_meta)
_USED_ARGS = frozenset(("correlation", "device", "stream", "Input Dims", "Input type", *META_KEYS))
_SHAPES = 64  # dimensions kept of record_shapes' first input


def slim_args(args: dict) -> dict:
    """The args of an event the reader keeps, bounded whatever the trace holds, so that
    KEPT_BYTES holds: only the keys it reads, strings cut at limits.MAX_NAME, of record_shapes'
    lists only the first input's (at most _SHAPES dimensions), no other list or object."""
    out: dict = {}
    for k in _USED_ARGS.intersection(args):
        v = args[k]
        if isinstance(v, str):
            out[k] = limits.cut_name(v)
        elif k in ("Input Dims", "Input type") and isinstance(v, list) and v:
            first = v[0]
            if isinstance(first, list) and len(first) <= _SHAPES and all(isinstance(x, int) for x in first):
                out[k] = [first]
            elif isinstance(first, str):
                out[k] = [limits.cut_name(first)]
        elif not isinstance(v, (list, dict)):
            out[k] = v
    return out


def check_budget(path: Path, kept: int, small: int) -> None:
    """An InputError when the events kept so far would not fit in the memory budget: kept
    events (kernels, ranges, record_param_comms, markers) cost KEPT_BYTES each, small ones
    (compute kernels, launches) SMALL_BYTES."""
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
