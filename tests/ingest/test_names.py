"""Kernel-name and range-name parsing: the three NCCL kernel families and PyTorch/NCCL range names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsyscomm.ingest.names import KernelInfo, canonical_op, parse_kernel

OPS = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
}
OLD_TYPES = {
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "__nv_bfloat16": "bfloat16",
}
NEW_TYPES = {
    "i8": "int8",
    "u8": "uint8",
    "i32": "int32",
    "u32": "uint32",
    "i64": "int64",
    "u64": "uint64",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "f8e4m3": "float8_e4m3fn",
    "f8e5m2": "float8_e5m2",
}
ALGOS = ["RING", "TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"]
PROTOS = ["LL", "LL128", "SIMPLE"]
REDOPS = ["Sum", "Prod", "MinMax", "PreMulSum", "SumPostDiv"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float", KernelInfo("all_reduce", "RING", "LL", "sum", "float32")),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", KernelInfo("all_reduce", "RING", "LL", "sum", "float32")),
        ("ncclDevKernel_SendRecv", KernelInfo("send", None, None, None, None)),
        (
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            KernelInfo("send", None, None, None, None),
        ),
        ("ncclDevKernel_AllGather_RING_LL", KernelInfo("all_gather", "RING", "LL", None, None)),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", KernelInfo("reduce_scatter", "RING", "LL", "sum", "bfloat16")),
        ("ncclSymkDevKernel_ReduceScatter_LL_sum_bf16", KernelInfo("reduce_scatter", "LL", None, "sum", "bfloat16")),
        (
            "ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_f32",
            KernelInfo("all_reduce", "RSxLDMC_AGxSTMC", None, "sum", "float32"),
        ),
        ("ncclSymkDevKernel_AllGather_LLMC", KernelInfo("all_gather", "LLMC", None, None, None)),
        ("ncclAllReduceRingLLKernel_sum_f32", KernelInfo("all_reduce", "RING", "LL", "sum", "float32")),
        ("ampere_sgemm_128x64_nn", KernelInfo(None, None, None, None, None)),
        ("", KernelInfo(None, None, None, None, None)),
    ],
)
def test_known_kernel_names(name, expected):
    assert parse_kernel(name) == expected


@given(
    st.sampled_from(list(OPS)),
    st.sampled_from(ALGOS),
    st.sampled_from(PROTOS),
    st.sampled_from(REDOPS),
    st.sampled_from(list(OLD_TYPES)),
)
def test_nccl_218_family_roundtrip(op, algo, proto, redop, dtype):
    info = parse_kernel(f"ncclKernel_{op}_{algo}_{proto}_{redop}_{dtype}")
    assert info == KernelInfo(OPS[op], algo, proto, redop.lower(), OLD_TYPES[dtype])


@given(
    st.sampled_from(["AllReduce", "ReduceScatter", "Reduce"]),
    st.sampled_from(ALGOS),
    st.sampled_from(PROTOS),
    st.sampled_from(REDOPS),
    st.sampled_from(list(NEW_TYPES)),
)
def test_nccl_219_family_roundtrip(op, algo, proto, redop, dtype):
    info = parse_kernel(f"ncclDevKernel_{op}_{redop}_{dtype}_{algo}_{proto}")
    assert info == KernelInfo(OPS[op], algo, proto, redop.lower(), NEW_TYPES[dtype])


@given(
    st.sampled_from(["AllReduce", "ReduceScatter"]),
    st.sampled_from(["AGxLL_R", "RSxLD_AGxST", "LL", "LD"]),
    st.sampled_from(["sum", "prod", "minmax"]),
    st.sampled_from(list(NEW_TYPES)),
)
def test_symmetric_family_roundtrip(op, algo, redop, dtype):
    info = parse_kernel(f"ncclSymkDevKernel_{op}_{algo}_{redop}_{dtype}")
    assert info == KernelInfo(OPS[op], algo, None, redop, NEW_TYPES[dtype])


@given(st.text(max_size=200))
def test_parsers_never_raise(s):
    info = parse_kernel(s)
    assert isinstance(info, KernelInfo)
    op = canonical_op(s)
    assert op is None or isinstance(op, str)


@pytest.mark.parametrize(
    "api, op",
    [
        ("nccl:all_to_all, op_id = 991144", "all_to_all"),
        ("nccl:_allgather_base", "all_gather"),
        ("nccl:_reduce_scatter_base", "reduce_scatter"),
        ("nccl:all_reduce", "all_reduce"),
        ("gloo:all_reduce", "all_reduce"),
        ("ncclAllReduce", "all_reduce"),
        ("ncclAlltoAll", "all_to_all"),
        ("all_gather_into_tensor", "all_gather"),
        ("reduce_scatter_tensor_coalesced", "reduce_scatter"),
        ("broadcast_object_list", "broadcast"),
        ("isend", "send"),
        ("irecv", "recv"),
        ("nccl:send 0->1", "send"),
        ("barrier", "barrier"),
        ("ncclGroupEnd", None),
        ("DDP bucket", None),
        (None, None),
    ],
)
def test_canonical_op(api, op):
    assert canonical_op(api) == op
