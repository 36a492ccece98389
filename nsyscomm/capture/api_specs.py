"""What the wrapper's layer 1 knows of each torch.distributed function it wraps: the collective
family, how its message size is counted (nccl-tests' S), where its tensors, group and async flag
are among the arguments, and how a point-to-point call names its peer. Data only, and the small
argument readers the specs name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsyscomm.capture.groups import Group


def arg(args: Sequence[Any], kwargs: Mapping[str, Any], idx: int | None, kw: str | None, default: Any = None) -> Any:
    """Argument idx (positional) or kw (keyword) of a call, else default."""
    if idx is not None and len(args) > idx:
        return args[idx]
    return default if kw is None else kwargs.get(kw, default)


def _peer(args: Sequence[Any], kwargs: Mapping[str, Any], g: Group, kw: str) -> int:
    """The peer's global rank: argument 1 or `kw` (dst, src), else the group rank `group_<kw>`
    translated through the group's ranks; -1 when neither is given."""
    peer = arg(args, kwargs, 1, kw)
    if peer is None:
        in_group = kwargs.get(f"group_{kw}")
        peer = g.ranks[in_group] if in_group is not None else -1
    return peer


def peer_send(args: Sequence[Any], kwargs: Mapping[str, Any], g: Group) -> int:
    return _peer(args, kwargs, g, "dst")


def peer_recv(args: Sequence[Any], kwargs: Mapping[str, Any], g: Group) -> int:
    return _peer(args, kwargs, g, "src")


# api -> (op, size_rule, tensor idx, tensor kw, group idx, group kw, async idx, extra)
C10D_SPECS: dict[str, tuple[str, str, int | None, str | None, int, str, int | None, dict[str, Any]]] = {
    "all_reduce": ("all_reduce", "t", 0, "tensor", 2, "group", 3, {}),
    "broadcast": ("broadcast", "t", 0, "tensor", 2, "group", 3, {}),
    "reduce": ("reduce", "t", 0, "tensor", 3, "group", 4, {}),
    "all_gather": ("all_gather", "list", 0, "tensor_list", 2, "group", 3, {}),
    "all_gather_single": ("all_gather", "t", 0, "output_tensor", 2, "group", 3, {}),
    "all_gather_into_tensor": ("all_gather", "t", 0, "output_tensor", 2, "group", 3, {}),
    "all_gather_coalesced": ("all_gather", "list", 0, "output_tensor_lists", 2, "group", 3, {}),
    "reduce_scatter": ("reduce_scatter", "list", 1, "input_list", 3, "group", 4, {}),
    "reduce_scatter_single": ("reduce_scatter", "t", 1, "input", 3, "group", 4, {}),
    "reduce_scatter_tensor": ("reduce_scatter", "t", 1, "input", 3, "group", 4, {}),
    "all_to_all": ("all_to_all", "list", 1, "input_tensor_list", 2, "group", 3, {}),
    "all_to_all_single": ("all_to_all", "t", 1, "input", 4, "group", 5, {}),
    "all_reduce_coalesced": ("all_reduce", "list", 0, "tensors", 2, "group", 3, {}),
    "gather": ("gather", "t_n", 0, "tensor", 3, "group", 4, {}),
    "scatter": ("scatter", "t_n", 0, "tensor", 3, "group", 4, {}),
    "barrier": ("barrier", "none", None, None, 0, "group", 1, {}),
    "monitored_barrier": ("barrier", "none", None, None, 0, "group", None, {}),
    "send": ("send", "t", 0, "tensor", 2, "group", None, {"p2p": peer_send}),
    "recv": ("recv", "t", 0, "tensor", 2, "group", None, {"p2p": peer_recv}),
    "isend": ("send", "t", 0, "tensor", 2, "group", None, {"p2p": peer_send, "always_async": True}),
    "irecv": ("recv", "t", 0, "tensor", 2, "group", None, {"p2p": peer_recv, "always_async": True}),
    "broadcast_object_list": ("broadcast", "obj", None, None, 2, "group", None, {}),
    "all_gather_object": ("all_gather", "obj", None, None, 2, "group", None, {}),
    "gather_object": ("gather", "obj", None, None, 3, "group", None, {}),
    "scatter_object_list": ("scatter", "obj", None, None, 3, "group", None, {}),
    "send_object_list": ("send", "obj", None, None, 2, "group", None, {}),
    "recv_object_list": ("recv", "obj", None, None, 2, "group", None, {}),
}

# functional collectives: api -> (op, size_rule, tensor idx, tensor kw, group idx)
FUNCOL_SPECS = {
    "broadcast": ("broadcast", "t", 0, "self", 2),
    "all_reduce": ("all_reduce", "t", 0, "self", 2),
    "all_gather_single": ("all_gather", "t_n", 0, "self", 2),
    "all_gather_tensor": ("all_gather", "t_n", 0, "self", 2),
    "all_gather_tensor_autograd": ("all_gather", "t_n", 0, "self", 2),
    "all_gather_single_autograd": ("all_gather", "t_n", 0, "self", 2),
    "reduce_scatter_single": ("reduce_scatter", "t", 0, "self", 3),
    "reduce_scatter_tensor": ("reduce_scatter", "t", 0, "self", 3),
    "reduce_scatter_tensor_autograd": ("reduce_scatter", "t", 0, "self", 3),
    "reduce_scatter_single_autograd": ("reduce_scatter", "t", 0, "self", 3),
    "all_reduce_coalesced": ("all_reduce", "list", 0, "self", 2),
    "all_gather_single_coalesced": ("all_gather", "list_n", 0, "self", 1),
    "all_gather_into_tensor_coalesced": ("all_gather", "list_n", 0, "self", 1),
    "reduce_scatter_single_coalesced": ("reduce_scatter", "list", 0, "inputs", 3),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "list", 0, "inputs", 3),
    "all_to_all_single": ("all_to_all", "t", 0, "self", 3),
    "all_to_all_single_autograd": ("all_to_all", "t", 0, "self", 3),
    "permute_tensor": ("send", "t", 0, "self", 2),
}
