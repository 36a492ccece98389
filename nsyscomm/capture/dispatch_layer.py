"""Layer 2 of the wrapper (nsyscomm.capture.wrapper's docstring): a catch-all at the dispatcher.

A Python kernel registered for every ``c10d::*`` op and the ``_c10d_functional::*`` collectives
on the Autograd keys (AutogradCPU / AutogradCUDA) annotates what bypasses the Python functions
of layer 1: DDP's C++ reducer, DDP's broadcasts, torch.compile'd code, names imported before
annotate(). Calls made through layer 1 run with the Autograd keys excluded and never get here.
The kernels read the wrapper's state (enabled, emitter, thread flags) when they run: install()
is given the wrapper module instead of importing it, so the two do not import each other.
"""

from __future__ import annotations

import os
import sys
from types import FrameType

from nsyscomm import nvtx_format as _fmt
from nsyscomm.capture import completion, groups, python_layer
from nsyscomm.capture.wrapper_state import WrapperState, close_call

W: WrapperState  # nsyscomm.capture.wrapper, set by install()


# c10d op -> (family, arg index of the tensors that give S, multiply by group size)
_OP_SPECS = {
    "allreduce_": ("all_reduce", 0, False),
    "allreduce_coalesced_": ("all_reduce", 0, False),
    "broadcast_": ("broadcast", 0, False),
    "reduce_": ("reduce", 0, False),
    "allgather_": ("all_gather", 0, False),
    "_allgather_base_": ("all_gather", 0, False),
    "allgather_coalesced_": ("all_gather", 0, False),
    "allgather_into_tensor_coalesced_": ("all_gather", 0, False),
    "reduce_scatter_": ("reduce_scatter", 1, False),
    "_reduce_scatter_base_": ("reduce_scatter", 1, False),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1, False),
    "alltoall_": ("all_to_all", 1, False),
    "alltoall_base_": ("all_to_all", 1, False),
    "gather_": ("gather", 1, True),
    "scatter_": ("scatter", 0, True),
    "send": ("send", 0, False),
    "recv_": ("recv", 0, False),
    "recv_any_source_": ("recv", 0, False),
    "barrier": ("barrier", None, False),
    "monitored_barrier_": ("barrier", None, False),
}


_DDP_FILE = os.path.join("nn", "parallel", "distributed.py")
_AUTOGRAD_DIR = os.sep + "autograd" + os.sep
_ddp_code: dict = {}  # code object -> True when its frames mean "called by DDP"


def _dispatch_api(name):
    """Label a call that reached the dispatcher without a Python wrapper: DDP's reducer, DDP's broadcasts, other."""
    if W._tls.api:
        return W._tls.api
    f: FrameType | None = sys._getframe(2)
    known = _ddp_code
    while f is not None:
        code = f.f_code
        ddp = known.get(code)
        if ddp is None:
            fn = code.co_filename
            # the C++ reducer runs from autograd's backward; bucket broadcasts from DDP's Python
            ddp = known[code] = fn.endswith(_DDP_FILE) or (_AUTOGRAD_DIR in fn and fn.startswith(W._skip_dirs))
        if ddp:
            return "ddp." + name.strip("_")
        f = f.f_back
    return "c10d." + name.strip("_")


# _c10d_functional op -> (family, arg index of the tensor(s), multiply by group size, arg index of
# the group name). What torch.compile'd code calls (Inductor emits these ops, in place where it
# can), and what eager code reaches when it calls a functional collective not through the module
# attribute nsyscomm wraps (e.g. a name imported before annotate()).
_FUNCOL_OP_SPECS = {
    "all_reduce": ("all_reduce", 0, False, 2),
    "all_reduce_": ("all_reduce", 0, False, 2),
    "all_reduce_coalesced": ("all_reduce", 0, False, 2),
    "all_reduce_coalesced_": ("all_reduce", 0, False, 2),
    "all_gather_into_tensor": ("all_gather", 0, True, 2),
    "all_gather_into_tensor_out": ("all_gather", 0, True, 2),
    "all_gather_into_tensor_coalesced": ("all_gather", 0, True, 2),
    "reduce_scatter_tensor": ("reduce_scatter", 0, False, 3),
    "reduce_scatter_tensor_out": ("reduce_scatter", 0, False, 3),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 0, False, 3),
    "all_to_all_single": ("all_to_all", 0, False, 3),
    "broadcast": ("broadcast", 0, False, 2),
    "broadcast_": ("broadcast", 0, False, 2),
}


def _funcol_op_message(name, args):
    op, ti, times_n, gi = _FUNCOL_OP_SPECS[name]
    pg = args[gi]
    if not isinstance(pg, W._c10d.ProcessGroup):
        pg = W._c10d._resolve_process_group(pg)
    g = groups.group(pg)
    nbytes, numel, dt = groups.sum_bytes(args[ti])
    if times_n:
        nbytes *= g.size
        numel *= g.size
    seq = next(g.counter)
    msg = W._compose(g, op, "_c10d_functional." + name, dt, nbytes, numel, seq, "1")
    return msg, (_fmt.format_ident(op, g.name, seq) if g.tracked else None)


def _tracing(args) -> bool:
    """A call being traced (torch.compile, make_fx), not a collective that runs: its tensors are
    fake or functional (tensor subclasses). A plain tensor is a real call, even with a dispatch
    mode active (AOTAutograd runs a compiled graph's first call under one)."""
    try:
        T = W._torch.Tensor
        for a in args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, T) and type(t) is not T and not isinstance(t, W._torch.nn.Parameter):
                    return True
    except Exception:
        return True
    return False


def _dispatch_message(name, args):
    spec = _OP_SPECS[name]
    op, ti, times_n = spec
    pg = None
    pg_pos = None
    for i, a in enumerate(args):
        if isinstance(a, W._c10d.ProcessGroup):
            pg, pg_pos = a, i
            break
    g = groups.group(pg)
    if ti is None:
        nbytes, numel, dt = 0, 0, None
    else:
        nbytes, numel, dt = groups.sum_bytes(args[ti])
        if times_n:
            nbytes *= g.size
            numel *= g.size
    peer = None
    if op in ("send", "recv") and pg_pos is not None:
        peer = -1
        try:
            if name != "recv_any_source_":
                peer = g.ranks[int(args[pg_pos + 1])]
        except Exception:
            pass
        seq = g.p2p_seq(peer)
    else:
        seq = next(g.counter)
    msg = W._compose(g, op, _dispatch_api(name), dt, nbytes, numel, seq, "1", peer)
    return msg, (_fmt.format_ident(op, g.name, seq, peer) if g.tracked else None)


def _make_kernel(name, opov, message=None):
    message = message or _dispatch_message
    functional = message is _funcol_op_message

    def kernel(*args, **kwargs):
        pushed = False
        rf = None
        ident = None
        if W._enabled and not (functional and _tracing(args)):
            try:
                msg, ident = message(name, args)
                W._push(msg)
                pushed = True
                if W._prof._is_profiler_enabled:
                    rf = W._rf_enter(msg, None)
            except Exception as e:
                W._warn_once("c10d." + name, f"nsyscomm: could not annotate c10d::{name} ({e!r})")
        done = False
        try:
            with W._Below():
                r = opov(*args, **kwargs)
            done = True
        finally:
            if pushed or rf is not None:
                close_call(W, rf, pushed, done)
        if ident is not None:  # the work runs on the backend's thread: mark when it is done
            python_layer.track(r, ident, "c10d." + name)
            if "|api=ddp." in msg:  # the reducer waits for it at the end of backward
                completion.backward_wait(ident)
        return r

    return kernel


def install(wrapper: WrapperState) -> tuple[tuple, int]:
    """Register the dispatcher kernels; returns (the torch.library.Library objects holding them,
    how many were registered). wrapper: nsyscomm.capture.wrapper, whose state the kernels read
    when they run (annotate() toggles it, the emitter is bound after install)."""
    global W
    W = wrapper
    torch = W._torch
    lib = torch.library.Library("c10d", "IMPL")
    n = 0
    for name in _OP_SPECS:
        packet = getattr(torch.ops.c10d, name, None)
        if packet is None:
            continue
        opov = packet.default
        for key in ("AutogradCPU", "AutogradCUDA"):
            try:
                lib.impl(name, _make_kernel(name, opov), key)
                n += 1
            except Exception as e:
                W._warn_once("impl" + name + key, f"nsyscomm: no dispatcher hook for c10d::{name} on {key} ({e!r})")
    # functional collectives as ops (torch.compile'd code); ops whose own autograd kernel is
    # registered per backend are left alone (ours would replace it)
    try:
        flib = torch.library.Library("_c10d_functional", "IMPL")
    except Exception as e:
        flib = None
        W._warn_once("impl_funcol", f"nsyscomm: no dispatcher hook for _c10d_functional ops ({e!r})")
    for name in _FUNCOL_OP_SPECS if flib is not None else ():
        packet = getattr(torch.ops._c10d_functional, name, None)
        if packet is None:
            continue
        for key in ("AutogradCPU", "AutogradCUDA"):
            try:
                if torch._C._dispatch_has_kernel_for_dispatch_key(f"_c10d_functional::{name}", key):
                    continue
                flib.impl(name, _make_kernel(name, packet.default, _funcol_op_message), key)
                n += 1
            except Exception as e:
                W._warn_once(
                    "impl" + name + key, f"nsyscomm: no dispatcher hook for _c10d_functional::{name} on {key} ({e!r})"
                )
    return ((lib, flib) if flib is not None else (lib,)), n
