"""Names to canonical collectives: NCCL kernel names, NCCL's NVTX ranges, PyTorch ranges.

Parsed in Python on the *distinct* names only (a report has a few dozen), then joined
back in SQL as a small lookup table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

# NCCL's operation names (kernel names and ncclXxx API ranges) -> canonical op
_NCCL_OPS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "alltoallv": "all_to_all",
    "send": "send",
    "recv": "recv",
    "sendrecv": "send",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "bcast": "broadcast",
}

# NCCL dtype spellings (<= 2.18 C type names, >= 2.19 short names) -> torch spelling
_DTYPES = {
    "int8_t": "int8",
    "i8": "int8",
    "char": "int8",
    "uint8_t": "uint8",
    "u8": "uint8",
    "int32_t": "int32",
    "i32": "int32",
    "int": "int32",
    "uint32_t": "uint32",
    "u32": "uint32",
    "int64_t": "int64",
    "i64": "int64",
    "uint64_t": "uint64",
    "u64": "uint64",
    "half": "float16",
    "f16": "float16",
    "float": "float32",
    "f32": "float32",
    "double": "float64",
    "f64": "float64",
    "__nv_bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "f8e4m3": "float8_e4m3fn",
    "__nv_fp8_e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
    "__nv_fp8_e5m2": "float8_e5m2",
}
_REDOPS = {"sum", "prod", "max", "min", "minmax", "premulsum", "sumpostdiv", "avg"}
_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "RING", "TREE", "PAT")
_PROTOS = ("LL128", "LL", "SIMPLE")


class KernelInfo(NamedTuple):
    op: str | None
    algo: str | None
    proto: str | None
    redop: str | None
    dtype: str | None


_EMPTY = KernelInfo(None, None, None, None, None)


def _op(token: str) -> str | None:
    return _NCCL_OPS.get(token.lower())


def nccl_kernel_names(rows: Iterable[tuple[int, str]]) -> list[tuple]:
    """(id, name) of StringIds values LIKE 'nccl%' -> (id, name, op, algo, proto, redop, dtype)
    of those that are NCCL kernels (a parsed op, or a family with no detail in the name)."""
    parsed = [(i, v, *parse_kernel(v)) for i, v in rows]
    return [p for p in parsed if p[2] is not None or p[1].startswith(("ncclDevKernel", "ncclKernel", "ncclSym"))]


def parse_kernel(name: str) -> KernelInfo:
    """Parse an NCCL kernel short name of any of the three families; non-NCCL names give all None.

    ncclKernel_AllReduce_RING_LL_Sum_float          NCCL <= 2.18: op_algo_proto_redop_type
    ncclDevKernel_AllReduce_Sum_f32_RING_LL         NCCL >= 2.19: op[_redop_type]_algo_proto
    ncclDevKernel_SendRecv, ncclDevKernel_Generic   NCCL >= 2.19, no detail in the name
    ncclSymkDevKernel_ReduceScatter_LL_sum_bf16     symmetric kernels (2.27+): op_algo[_redop_type]
    ncclAllReduceRingLLKernel_sum_f32               NCCL 2.4 - 2.7
    """
    if not name:
        return _EMPTY
    name = name.split("(", 1)[0].strip()
    m = re.match(r"^(ncclKernel|ncclDevKernel|ncclSymkDevKernel|ncclSymDevKernel)_([A-Za-z]+)(?:_(.*))?$", name)
    if m:
        family, op_tok, rest = m.group(1), m.group(2), m.group(3) or ""
        tokens = [t for t in rest.split("_") if t]
        op = _op(op_tok)
        algo = proto = redop = dtype = None
        if family.startswith("ncclSym"):
            # algo tokens until a reduction op; then redop, then dtype
            algo_tokens = []
            for i, t in enumerate(tokens):
                if t.lower() in _REDOPS:
                    redop = t.lower()
                    dtype = _DTYPES.get("_".join(tokens[i + 1 :]).lower()) if i + 1 < len(tokens) else None
                    break
                algo_tokens.append(t)
            algo = "_".join(algo_tokens) or None
            return KernelInfo(op, algo, None, redop, dtype)
        joined = "_".join(tokens)
        for a in _ALGOS:
            hit = re.search(rf"(?:^|_){a}_({'|'.join(_PROTOS)})(?:_|$)", joined)
            if hit:
                algo, proto = a, hit.group(1)
                joined = (joined[: hit.start()] + "_" + joined[hit.end() :]).strip("_")
                break
        tokens = [t for t in joined.split("_") if t]
        # what is left: [redop, dtype] (dtype may itself contain '_', e.g. int8_t, __nv_bfloat16)
        if tokens and tokens[0].lower() in _REDOPS:
            redop = tokens[0].lower()
            tokens = tokens[1:]
        if tokens:
            raw = "_".join(tokens)
            dtype = _DTYPES.get(raw) or _DTYPES.get(raw.lower()) or _DTYPES.get("__" + raw)
        return KernelInfo(op, algo, proto, redop, dtype)
    m = re.match(
        r"^nccl([A-Z][A-Za-z]*?)(Ring|Tree|CollNet)?(LL128|LL|Simple)?Kernel(?:_([a-z]+)_([a-z0-9_]+))?$", name
    )
    if m:
        return KernelInfo(
            _op(m.group(1)),
            (m.group(2) or "").upper() or None,
            (m.group(3) or "").upper() or None,
            m.group(4),
            _DTYPES.get(m.group(5) or ""),
        )
    return _EMPTY


def is_nccl_kernel(name: str) -> bool:
    return parse_kernel(name).op is not None or (name or "").startswith(("ncclDevKernel_", "ncclKernel_", "ncclSym"))


_RANGE_PREFIX = re.compile(r"^(?:nccl|gloo|mpi|ucc|xccl|c10d)[:.]", re.IGNORECASE)


def canonical_op(api: str | None) -> str | None:
    """Map an API or range name to an op family: 'nccl:_allgather_base' -> all_gather,
    'nccl:all_to_all, op_id = 7' -> all_to_all, 'ncclAllReduce' -> all_reduce,
    'reduce_scatter_tensor_coalesced' -> reduce_scatter, 'DDP bucket' -> None."""
    if not api:
        return None
    s = _RANGE_PREFIX.sub("", api.strip())
    s = s.split(",", 1)[0].split(" ", 1)[0]
    if s.startswith("nccl") and len(s) > 4 and s[4].isupper():
        s = s[4:]
    key = re.sub(r"[^a-z]", "", s.lower())
    for suffix in (
        "objectlist",
        "intotensorcoalesced",
        "tensorcoalesced",
        "coalesced",
        "intotensor",
        "base",
        "single",
        "tensor",
        "object",
        "multigpu",
        "list",
    ):
        if key.endswith(suffix) and key[: -len(suffix)] in _NCCL_OPS:
            key = key[: -len(suffix)]
            break
    if key in ("isend",):
        key = "send"
    if key in ("irecv",):
        key = "recv"
    return _NCCL_OPS.get(key)
