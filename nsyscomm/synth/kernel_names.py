"""NCCL kernel names as the generator writes them, parsed back for the ground truth: written here
independently of nsyscomm.ingest.names, so that the truth does not come from the code under test."""

from __future__ import annotations

_FAMILY = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "send",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}
_ALGOS = ("RING", "TREE", "COLLNET", "COLLNETDIRECT", "COLLNETCHAIN", "NVLS", "NVLSTREE", "PAT")
_PROTOS = ("LL", "LL128", "SIMPLE")
_DTYPES = {
    "float": "float32",
    "f32": "float32",
    "half": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "double": "float64",
    "f64": "float64",
    "int8_t": "int8",
    "i8": "int8",
    "uint8_t": "uint8",
    "u8": "uint8",
    "int32_t": "int32",
    "i32": "int32",
    "uint32_t": "uint32",
    "u32": "uint32",
    "int64_t": "int64",
    "i64": "int64",
    "uint64_t": "uint64",
    "u64": "uint64",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}


def parse_kernel_name(name: str) -> dict:
    """op family, algo, proto, dtype (torch spelling) from an NCCL kernel name (all three families)."""
    tokens = name.split("_")
    fam = tokens[1] if len(tokens) > 1 else ""
    return {
        "op": _FAMILY.get(fam),
        "algo": next((t for t in tokens[2:] if t in _ALGOS), None),
        "proto": next((t for t in tokens[2:] if t in _PROTOS), None),
        "dtype": next((_DTYPES[t] for t in tokens[2:] if t in _DTYPES), None),
    }
