"""The collective metadata PyTorch records in a Kineto trace (``record_param_comms`` and the kernel's
copy of it: ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
process group name and ranks) turned into a message size S as nccl-tests counts it
(docs/architecture.md, "Message size and bus bandwidth")."""

from __future__ import annotations

from typing import Any

from nsyscomm.ingest.names import canonical_op

# c10 ScalarType names (as in record_param_comms' "dtype") and record_shapes' "Input type"
# spellings -> (torch spelling, bytes per element)
DTYPES = {
    "Float": ("float32", 4),
    "float": ("float32", 4),
    "Double": ("float64", 8),
    "double": ("float64", 8),
    "Half": ("float16", 2),
    "c10::Half": ("float16", 2),
    "BFloat16": ("bfloat16", 2),
    "c10::BFloat16": ("bfloat16", 2),
    "Long": ("int64", 8),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "Int": ("int32", 4),
    "int": ("int32", 4),
    "Short": ("int16", 2),
    "short": ("int16", 2),
    "Char": ("int8", 1),
    "signed char": ("int8", 1),
    "Byte": ("uint8", 1),
    "unsigned char": ("uint8", 1),
    "Bool": ("bool", 1),
    "bool": ("bool", 1),
    "ComplexFloat": ("complex64", 8),
    "ComplexDouble": ("complex128", 16),
    "Float8_e4m3fn": ("float8_e4m3fn", 1),
    "Float8_e5m2": ("float8_e5m2", 1),
    "UInt16": ("uint16", 2),
    "UInt32": ("uint32", 4),
    "UInt64": ("uint64", 8),
}

_TORCH_SIZES = {v[0]: v[1] for v in DTYPES.values()} | {"float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}

META_KEYS = (  # the args PyTorch records per collective (read by meta_row)
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Process Group Description",
    "Seq",
    "Comms Id",
    "Root",
)


def _dtype(raw) -> tuple[str | None, int | None]:
    if raw is None:
        return None, None
    raw = str(raw)
    if raw in DTYPES:
        return DTYPES[raw]
    low = raw.lower().replace("torch.", "")
    if low in _TORCH_SIZES:
        return low, _TORCH_SIZES[low]
    return raw, None


_INT64 = 1 << 63


def int_or_none(v: Any) -> int | None:
    """v as an int, or None when it is none, not a number, or no 64-bit integer (inf, 1e300)."""
    try:
        if v is None or v == "":
            return None
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return i if -_INT64 <= i < _INT64 else None


def message_size(
    op: str | None, in_nelems: Any, out_nelems: Any, typesize: int | None, group_size: Any
) -> tuple[int | None, int | None]:
    """(S bytes, numel) in nccl-tests terms from PyTorch's In/Out msg nelems (per rank).

    all_gather:     In = per-rank input, Out = n x In   -> S = n x In x typesize
    reduce_scatter: In = n x Out, Out = per-rank output -> S = n x Out x typesize
    gather/scatter: S = n x per-rank chunk
    barrier: 0; others: S = In x typesize (all_to_all: what one rank sends)."""
    i, o, n = int_or_none(in_nelems), int_or_none(out_nelems), int_or_none(group_size)
    if op == "barrier":
        return 0, 0
    if not typesize or op is None:
        return None, i
    if op == "all_gather":
        if i is not None and n:
            return n * i * typesize, n * i
        return (o * typesize, o) if o is not None else (None, None)
    if op == "reduce_scatter":
        if o is not None and n:
            return n * o * typesize, n * o
        return (i * typesize, i) if i is not None else (None, None)
    if op == "gather":
        if i is not None and n:
            return n * i * typesize, n * i
        return None, None
    if op == "scatter":
        if o is not None and n:
            return n * o * typesize, n * o
        return None, None
    count = i if i is not None else o
    return (count * typesize, count) if count is not None else (None, None)


def meta_row(args: dict) -> dict:
    """Normalized metadata from record_param_comms / kernel args (empty values -> None)."""
    api = args.get("Collective name")
    op = canonical_op(str(api)) if api else None
    dtype, ts = _dtype(args.get("dtype"))
    gsize = int_or_none(args.get("Group size"))
    nbytes, numel = message_size(op, args.get("In msg nelems"), args.get("Out msg nelems"), ts, gsize)
    ranks = args.get("Process Group Ranks")
    group, seq = _match_key(op, args)
    return {
        "op": op,
        "api": str(api) if api else None,
        "bytes": nbytes,
        "numel": numel,
        "dtype": dtype,
        "group": group,
        "group_size": gsize,
        "group_ranks": None if ranks in (None, "") else str(ranks).replace(" ", ""),
        "seq": seq,
    }


def _match_key(op: str | None, args: dict) -> tuple[str | None, int | None]:
    """(group, seq) that match one logical collective across ranks exactly: the process group's
    name and PyTorch's per-group sequence number (``Seq``); else its ``Comms Id`` (a hash PyTorch
    makes of the group, the seq and the group's ranks, the same on each rank of one collective)
    alone; else no seq, and the calls are matched by their order (sql/collectives.sql). A seq
    without its group would match other groups' calls; a point-to-point call pairs by its
    messages' order, never by a key of its own."""
    group = args.get("Process Group Name")
    group = None if group in (None, "") else str(group)
    seq = int_or_none(args.get("Seq"))
    comms = args.get("Comms Id")
    if group is not None and seq is not None and seq >= 0:
        return group, seq
    if comms not in (None, "") and op not in ("send", "recv"):
        return f"comms-id:{str(comms)[:40]}", 0
    return group, None


def shape_meta(op: str | None, args: dict) -> dict:
    """record_shapes fallback (older traces: the nccl:* range's Input Dims/type) for ops whose S
    is simply count x typesize of the input."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if op not in ("all_reduce", "broadcast", "reduce", "send", "recv", "all_to_all") or not dims or not types:
        return {}
    if not isinstance(dims, list) or not isinstance(types, list):
        return {}
    if not isinstance(dims[0], list) or not dims[0]:
        return {}
    numel = 1
    for d in dims[0]:
        n = int_or_none(d)
        if n is None or numel * n >= _INT64:
            return {}
        numel *= n
    dtype, ts = _dtype(types[0])
    return {"numel": numel, "dtype": dtype, "bytes": numel * ts if ts else None}
