"""NVTX ranges around every torch.distributed collective (``nsyscomm.annotate()``).

Two layers, so that nothing is missed and the common path stays cheap:

1. Python wrappers replace the public functions of ``torch.distributed`` (both the package
   namespace and ``distributed_c10d``) and of ``torch.distributed._functional_collectives``.
   They know the exact API called, compute the nccl-tests message size, and push one range
   in domain ``nsyscomm`` around the original call (so the backend's kernel launch is inside).
2. A catch-all at the dispatcher level: a Python kernel registered for every ``c10d::*`` op
   and the ``_c10d_functional::*`` collectives on the Autograd keys (AutogradCPU /
   AutogradCUDA). It sees what bypasses the Python functions: DDP's C++ reducer (gradient
   all-reduces), DDP's parameter/buffer broadcasts, torch.compile'd code, anything imported
   before annotate(). Calls made through layer 1 run with the Autograd keys excluded, so they
   never reach layer 2 (one range per call, and layer 2's Python-kernel cost, many times layer
   1's, is paid only by calls that layer 1 did not see).

The hot wrappers of layer 1 (one-tensor calls) run their steady state in C when the optional
extension ``_fastpath`` is built (same messages, about half the cost per call:
docs/performance.md, "wrapper overhead per call").
An asynchronous call (one that returns a Work or a future) also gets its completion marked on the
backend's thread and its caller's wait ranged (completion.py); synchronous calls never pay for it.

Nothing here synchronizes a device or touches a tensor's data; a failure to build or emit
the message degrades to no annotation (warned once); exceptions of the collective itself
propagate unchanged. torch and nvtx are imported only when annotate() runs.

This module is the front door (annotate, step) and the state every part reads at call time: the
C fast path by name from this module's dict, the tests by patching it. Layer 1 is
python_layer.py, layer 2 dispatch_layer.py, the groups seen groups.py, the wrapped functions'
specs api_specs.py, the NVTX binding nvtx_emitter.py and what is bound from torch
torch_bindings.py; annotate() hands them this module or what they need, so none imports it back.
What the layers read of this module is declared, typed, in wrapper_state.py (WrapperState).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import FrameType, ModuleType
from typing import Any

from nsyscomm import nvtx_format as _fmt
from nsyscomm import settings
from nsyscomm.capture import (
    completion,
    dispatch_layer,
    groups,
    join_ranks,
    nvtx_emitter,
    pipeline_steps,
    python_layer,
    torch_bindings,
)
from nsyscomm.steps import parse_step_range

_lock = threading.RLock()
_enabled = False
_installed = False  # layer 1 installed (stays installed for isend/irecv, see annotate)
_patched: list = []  # (owner, name, original, wrapper)
_lib = None  # the torch.library.Library objects holding layer 2
_opt_hook = None
_warned: set = set()

_groups = groups.by_pg  # ProcessGroup -> groups.Group; the C fast path reads it by this name
_call_sites: dict = {}  # (code, f_lasti) -> "file:line function", or "" for a frame to skip

_step = None  # current step (int) or None
_explicit_step = False  # nsyscomm.step() was called: optimizer detection off
_first_optimizer = None  # id of the optimizer whose steps count
_capture = None  # (A, B) from NSYSCOMM_CAPTURE_STEPS
_capture_open = False
_rank_marked = False

# bound by annotate() before it installs any layer (nothing reads them before)
_torch: ModuleType  # torch
_c10d: ModuleType  # torch.distributed.distributed_c10d
_Below: Callable[[], AbstractContextManager[Any]]  # torch._C._AutoDispatchBelowAutograd

try:  # the hot wrappers' steady state in C; optional (a build without a compiler)
    from nsyscomm.capture import _fastpath  # type: ignore[attr-defined]  # (a C extension: no stub)
except ImportError:
    _fastpath = None
_fast_guard = False  # _fastpath holds the autograd-key guard in C (checked by _check_fast_guard)


# torch.profiler: while one records in this process, every range is also a record_function
# (user_annotation) range of the same message, so Kineto traces carry the metadata
class _ProfilerOff:
    _is_profiler_enabled = False


_prof = _ProfilerOff  # torch.autograd.profiler (its _is_profiler_enabled flag: one attribute read)


def _no_record_function(*_a: Any) -> None:
    """The record_function ops where torch has none: never called, as _prof then never says
    "profiling", but a callable, so that the layers' type is one type."""
    return None


_rf_enter: Callable[..., Any] = _no_record_function  # torch.ops.profiler._record_function_enter_new
_rf_exit: Callable[..., Any] = _no_record_function  # torch.ops.profiler._record_function_exit._RecordFunction
_profile_hook = None  # nsyscomm.capture.torch_profile under `nsyscomm run --profiler torch`


class _TLS(threading.local):
    busy: bool = False  # inside an annotated call on this thread: inner calls pass through
    api: str | None = None  # api label for layer-2 calls made by a layer-1 wrapper (batch_isend_irecv)
    attrs: Any = None  # this thread's nvtx EventAttributes, reused for every push (fast emitter)


if _fastpath is not None:
    _TLS.busy = _fastpath.busy_flag  # the same flag, kept in C (read by the C path without a lookup)
_tls = _TLS()


# ---------------------------------------------------------------- emission (monkeypatched in tests)


def _noop(*_a):
    return None


_push = _noop
_pop = _noop
_wpush = _noop  # the emitter's own push and pop, for the wait ranges (completion.py)
_wpop = _noop
_mark = _noop
_raising = _noop  # before the pop of a call left by an exception (the flight record flags it)
_emitter_kind = "none"
_domain_keepalive = None


def _init_emitter():
    """Bind _push/_pop/_mark to nvtx (nsyscomm.capture.nvtx_emitter)."""
    global _push, _pop, _mark, _emitter_kind, _domain_keepalive, _wpush, _wpop
    _push, _pop, _mark, _emitter_kind, _domain_keepalive = nvtx_emitter.make(_fastpath, _tls, _warn_once)
    _wpush, _wpop = _push, _pop


def _warn_once(key, text):
    if key in _warned:
        return
    _warned.add(key)
    try:
        warnings.warn(text, RuntimeWarning, stacklevel=3)
    except Exception:
        pass


def _rf_mark(msg):
    """A zero-length record_function range (the profiler's equivalent of an NVTX mark)."""
    try:
        if _prof is not None and _prof._is_profiler_enabled:
            _rf_exit(_rf_enter(msg, None))
    except Exception as e:
        _warn_once("rf", f"nsyscomm: could not record a profiler range ({e!r})")


def _rf_close(handle):
    try:
        _rf_exit(handle)
    except Exception as e:
        _warn_once("rf", f"nsyscomm: could not close a profiler range ({e!r})")


# ---------------------------------------------------------------- helpers

_skip_dirs: tuple = ()
_GENERATED = os.sep + "torchinductor_"  # Inductor's default cache dir, where its output code lives
# Communication layers whose frames are skipped on the way to the user's line: a collective made
# through them is the program's call, made where the program called the layer. Module names (a
# name and its submodules); users add theirs with NSYSCOMM_SKIP_MODULES (comma-separated) or
# `nsyscomm run --skip-module`. torch's own layers (FSDP, DTensor, pipelining, nn.parallel) are
# skipped with the rest of torch, by their directory.
LAYER_MODULES = (
    "torch",
    "nsyscomm",
    "deepspeed.comm",
    "deepspeed.runtime.comm",
    "accelerate",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
    "fairscale.nn.data_parallel",
)
SKIP_MODULES_ENV = "NSYSCOMM_SKIP_MODULES"
_skip_modules: tuple = tuple(m + "." for m in LAYER_MODULES)
_PACKAGE_DIRS = tuple(os.sep + d + os.sep for d in ("site-packages", "dist-packages"))


def skip_modules_from(user: tuple[str, ...]) -> tuple:
    """The module prefixes ("name.") whose frames _site skips: the known layers and the user's
    (module names, as settings.skip_modules() gives them)."""
    named = [m.strip().strip(".") for m in user]
    return tuple(dict.fromkeys(m + "." for m in (*LAYER_MODULES, *named) if m))


def _caller() -> str:
    """``file:line function`` of the first frame outside torch, nsyscomm and the communication
    layers (LAYER_MODULES and the user's NSYSCOMM_SKIP_MODULES).

    A sys._getframe walk; the answer for each (code, instruction offset) is cached ("" = a frame to
    skip), so a call site costs one dict lookup instead of a line-table decode (f_lineno) and a format.
    The C fast path (_fastpath.c) walks the same cache and calls _site on a miss.
    """
    f: FrameType | None = sys._getframe(2)
    sites = _call_sites
    while f is not None:
        site = sites.get((f.f_code, f.f_lasti))
        if site is None:
            site = _site(f)
        if site:
            return site
        f = f.f_back
    return ""


def _shown_path(fn: str) -> str:
    """A file as the caller column names it: inside an installed package, the path from the
    package on ("deepspeed/runtime/engine.py": which package's file it is); else the file's name."""
    at = max((fn.rfind(d), len(d)) for d in _PACKAGE_DIRS)
    return fn[sum(at) :].replace(os.sep, "/") if at[0] >= 0 else os.path.basename(fn)


def _site(f) -> str:
    """The cached answer of _caller for one frame: its "file:line function", or "" to skip it."""
    code = f.f_code
    fn = code.co_filename
    module = f.f_globals.get("__name__")
    # skipped too: code torch generates (fx graphs "<eval_with_key>.N ...", Inductor's output code)
    skip = (
        fn.startswith(_skip_dirs)
        or fn.startswith(("<frozen", "<eval_with_key>"))
        or _GENERATED in fn
        or (isinstance(module, str) and (module + ".").startswith(_skip_modules))
    )
    site = "" if skip else f"{_shown_path(fn)}:{f.f_lineno} {code.co_name}"
    if len(_call_sites) > 100_000:  # code made at run time (exec) would grow it without bound
        _call_sites.clear()
    _call_sites[(code, f.f_lasti)] = site
    return site


# ---------------------------------------------------------------- step and rank markers


def _emit_rank_marker():
    global _rank_marked
    try:
        if not _c10d.is_initialized():
            return
        rank = _c10d.get_rank()
        world = _c10d.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        if _profile_hook is not None and (_capture is None or _capture_open):
            _profile_hook.start(rank)
        msg = _fmt.format_rank_marker(rank, local, world, socket.gethostname())
        _mark(msg)
        _rf_mark(msg)
        _rank_marked = True
    except Exception as e:
        _warn_once("rank", f"nsyscomm: could not emit the rank marker ({e!r})")


def _set_step(i):
    global _step
    _step = i
    try:
        msg = _fmt.format_step_marker(i)
        _mark(msg)
        _rf_mark(msg)
        _update_capture(i)
    except Exception as e:
        _warn_once("step", f"nsyscomm: could not emit the step marker ({e!r})")


def _update_capture(i):
    global _capture_open
    if _capture is None:
        return
    a, b = _capture
    if not _capture_open and a <= i < b:
        _push(CAPTURE_RANGE)
        _capture_open = True
        _emit_rank_marker()
    elif _capture_open and i >= b:
        _pop()
        _capture_open = False
        if _profile_hook is not None:
            _profile_hook.finish()


CAPTURE_RANGE = _fmt.CAPTURE_RANGE


def step(i: int) -> None:
    """Declare that the following collectives belong to training step ``i`` (turns off optimizer detection)."""
    global _explicit_step
    _explicit_step = True
    _set_step(int(i))


def _optimizer_post_hook(optimizer, args, kwargs):
    global _first_optimizer
    if _explicit_step or not _enabled:
        return
    oid = id(optimizer)
    if _first_optimizer is None:
        _first_optimizer = oid
    if oid == _first_optimizer:
        pipeline_steps.optimizer_stepped()
        _set_step((_step or 0) + 1)


# ---------------------------------------------------------------- the message of one call


def _compose(g, op, api, dt, nbytes, numel, seq, asy, peer=None):
    """The NVTX message of one call of group g (the process's rank marker goes first, once).
    The hot wrapper and _fastpath.c build the same message inline from a cached template."""
    if not _rank_marked:
        _emit_rank_marker()
    st = _step
    msg = g.template(op, api, groups.dtype_name(dt) if dt is not None else "") % (
        nbytes,
        numel,
        seq,
        asy,
        "" if st is None else st,
        _caller(),
    )
    return msg if peer is None else _fmt.with_peer(msg, peer)


# ---------------------------------------------------------------- annotate


def _parse_capture(text):
    """NSYSCOMM_CAPTURE_STEPS (`nsyscomm run --steps` writes it) by nsyscomm.steps' one rule,
    from step 0 and to no end when a side is open; a value it refuses is warned about and ignored."""
    try:
        lo, hi = parse_step_range(text) or (None, None)
    except ValueError as e:
        _warn_once("steps", f"nsyscomm: ignoring NSYSCOMM_CAPTURE_STEPS: {e}")
        return None
    return (max(lo or 0, 0), 1 << 62 if hi is None else hi)


def annotate(enable: bool = True, *, ddp: bool = True) -> bool:
    """Turn the NVTX annotation of collectives on (default) or off. Idempotent and thread-safe.

    ``ddp=False`` skips the dispatcher-level layer (DDP's reducer calls are then not annotated).
    Returns True when annotation is active after the call.
    """
    global _enabled, _installed, _step
    with _lock:
        if not enable:
            if _installed:
                _disable()
            return False
        if _enabled:
            return True
        found = _import_torch()
        if found is None:
            return False
        try:
            _bind(*found)
            _install_layers(ddp)
            _installed = True
            _enabled = True
            if _step is None and not _explicit_step:
                _step = 0  # step 0 = before the first optimizer.step()
            if _capture is not None and not _capture_open:
                _update_capture(_step if _step is not None else 0)
            _emit_rank_marker()
            return True
        except Exception as e:
            _warn_once("annotate", f"nsyscomm: annotation is off ({e!r})")
            _enabled = False
            return False


def _disable() -> None:
    """Put torch's functions back (isend and irecv stay wrapped, passing through), drop the
    dispatcher kernels and the optimizer hook, and close an open capture range."""
    global _enabled, _installed, _lib, _opt_hook
    _enabled = False
    for owner, name, orig, new in reversed(_patched):
        if name in python_layer.KEEP and owner.__name__.endswith("distributed_c10d"):
            continue  # P2POps may hold the wrapper: torch compares `op.op is isend`
        if getattr(owner, name, None) is new:
            setattr(owner, name, orig)
    _patched[:] = [p for p in _patched if p[1] in python_layer.KEEP and p[0].__name__.endswith("distributed_c10d")]
    if _lib is not None:
        for lib in _lib:
            try:
                lib._destroy()
            except Exception:
                pass
        _lib = None
    if _opt_hook is not None:
        _opt_hook.remove()
        _opt_hook = None
    if _capture_open:
        try:
            _pop()
        except Exception:
            pass
    _installed = False


def _import_torch() -> tuple[ModuleType, ModuleType] | None:
    """(torch, torch.distributed.distributed_c10d), or None when there is nothing to annotate
    (warned once)."""
    try:
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            _warn_once("dist", "nsyscomm: torch.distributed is not available; nothing to annotate")
            return None
        import torch.distributed.distributed_c10d as c10d
    except Exception as e:
        _warn_once("torch", f"nsyscomm: torch is not importable ({e!r}); nothing to annotate")
        return None
    return torch, c10d


def _bind(torch: ModuleType, c10d: ModuleType) -> None:
    """Bind the state every layer reads: torch, the guard, the profiler ops, the frames the caller
    column skips, the emitter (chained to the flight record) and the steps to capture."""
    global _torch, _c10d, _Below, _profile_hook, _skip_dirs, _skip_modules, _push, _pop, _raising, _capture
    _torch, _c10d = torch, c10d
    _Below = torch._C._AutoDispatchBelowAutograd
    _check_fast_guard(torch)
    _bind_profiler(torch)
    if settings.profiler() == "torch" and _profile_hook is None:
        from nsyscomm.capture import torch_profile

        _profile_hook = torch_profile if torch_profile.configure() else None
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _skip_dirs = (os.path.dirname(os.path.abspath(torch.__file__ or "")) + os.sep, here + os.sep)
    _skip_modules = skip_modules_from(settings.skip_modules())
    _call_sites.clear()  # answers cached under other skip lists
    if _push is _noop and _emitter_kind == "none":
        _init_emitter()
        # every push/pop also writes the flight record (NSYSCOMM_RECORD_DIR): a hung
        # job's last calls survive the kill that ends it
        from nsyscomm.capture import flight_record

        _push, _pop, _raising = flight_record.chain(_push, _pop)
    if settings.capture_steps():
        _capture = _parse_capture(settings.capture_steps())


def _install_layers(ddp: bool) -> None:
    """Hand this module's state to the layers and install them (the Python functions, the
    dispatcher kernels unless ddp is False, the completion marks, the step detectors)."""
    global _lib, _opt_hook
    from nsyscomm.capture import wrapper as this  # this module, checked against WrapperState

    _patched[:] = [p for p in _patched if getattr(p[0], p[1], None) is p[3]]
    groups.bind(this)
    python_layer.install(this)
    if ddp:
        _lib, _ = dispatch_layer.install(this)
    completion.install(this)
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _opt_hook = register_optimizer_step_post_hook(_optimizer_post_hook)
    except Exception as e:
        _warn_once("optim", f"nsyscomm: no automatic step detection ({e!r}); call nsyscomm.step(i)")
    try:  # a pipeline schedule's step() is a step boundary too (no optimizer needed)
        pipeline_steps.install(this)
    except Exception as e:
        _warn_once("pipeline", f"nsyscomm: no pipeline-schedule steps ({e!r})")
    try:  # the collectives a rank makes after it joined under Join (uneven inputs) are shadows
        join_ranks.install(this)
    except Exception as e:
        _warn_once("join", f"nsyscomm: ranks that joined early are not told apart ({e!r})")


def _check_fast_guard(torch) -> None:
    """Use the C autograd-key guard in _fastpath only where it matches torch's own (torch_bindings)."""
    global _fast_guard
    _fast_guard = torch_bindings.fast_guard(_fastpath, torch)


def _bind_profiler(torch) -> None:
    """Bind the record_function ops; without them the flag object says 'never profiling'."""
    global _prof, _rf_enter, _rf_exit
    _prof, enter, exit_ = torch_bindings.profiler_ops(torch, _ProfilerOff, _warn_once)
    _rf_enter = enter if enter is not None else _no_record_function
    _rf_exit = exit_ if exit_ is not None else _no_record_function


def _reset_for_tests():
    """Forget counters, step and markers (tests only)."""
    global _step, _explicit_step, _first_optimizer, _rank_marked
    with _lock:
        groups.clear()
        _step = None
        _explicit_step = False
        _first_optimizer = None
        _rank_marked = False
        pipeline_steps.optimizer_stepped()
