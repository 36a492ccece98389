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
   never reach layer 2 (one range per call, and layer 2's ~50 us Python-kernel cost is paid
   only by calls that layer 1 did not see).

The hot wrappers of layer 1 (one-tensor calls) run their steady state in C when the optional
extension ``_fastpath`` is built (same messages, ~1.4 us instead of ~2.6 us per call).

Nothing here synchronizes a device or touches a tensor's data; a failure to build or emit
the message degrades to no annotation (warned once); exceptions of the collective itself
propagate unchanged. torch and nvtx are imported only when annotate() runs.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import warnings

from nsyscomm import nvtx_format as _fmt

_lock = threading.RLock()
_enabled = False
_installed = False  # layer 1 installed (stays installed for isend/irecv, see annotate)
_patched: list = []  # (owner, name, original, wrapper)
_lib = None  # the torch.library.Library objects holding layer 2
_opt_hook = None
_warned: set = set()

_groups: dict = {}  # ProcessGroup -> _Group
_seq: dict = {}  # seq key -> itertools.count
_dtype_names: dict = {}
_call_sites: dict = {}  # (code, f_lasti) -> "file:line function", or "" for a frame to skip

_step = None  # current step (int) or None
_explicit_step = False  # nsyscomm.step() was called: optimizer detection off
_first_optimizer = None  # id of the optimizer whose steps count
_capture = None  # (A, B) from NSYSCOMM_CAPTURE_STEPS
_capture_open = False
_rank_marked = False

_torch = None
_c10d = None
_Below = None  # torch._C._AutoDispatchBelowAutograd

try:  # the hot wrappers' steady state in C; optional (a build without a compiler)
    from nsyscomm.capture import _fastpath
except ImportError:
    _fastpath = None
_fast_guard = False  # _fastpath holds the autograd-key guard in C (checked by _check_fast_guard)


# torch.profiler: while one records in this process, every range is also a record_function
# (user_annotation) range of the same message, so Kineto traces carry the metadata
class _ProfilerOff:
    _is_profiler_enabled = False


_prof = _ProfilerOff  # torch.autograd.profiler (its _is_profiler_enabled flag: one attribute read)
_rf_enter = None  # torch.ops.profiler._record_function_enter_new
_rf_exit = None  # torch.ops.profiler._record_function_exit._RecordFunction
_profile_hook = None  # nsyscomm.capture.torch_profile under `nsyscomm run --profiler torch`


class _TLS(threading.local):
    busy = False  # inside an annotated call on this thread: inner calls pass through
    api = None  # api label for layer-2 calls made by a layer-1 wrapper (batch_isend_irecv)
    attrs = None  # this thread's nvtx EventAttributes, reused for every push (fast emitter)


if _fastpath is not None:
    _TLS.busy = _fastpath.busy_flag  # the same flag, kept in C (read by the C path without a lookup)
_tls = _TLS()


# ---------------------------------------------------------------- emission (monkeypatched in tests)


def _noop(*_a):
    return None


_push = _noop
_pop = _noop
_mark = _noop
_raising = _noop  # before the pop of a call left by an exception (the flight record flags it)
_emitter_kind = "none"
_domain_keepalive = None


def _init_emitter():
    """Bind _push/_pop/_mark to nvtx. Fast path for nvtx <= 0.2.11's Cython API, public API otherwise."""
    global _push, _pop, _mark, _emitter_kind, _domain_keepalive
    try:
        import nvtx  # noqa: F401
    except Exception as e:  # no nvtx: no annotation
        _warn_once(
            "nvtx",
            f"nsyscomm: the nvtx package is not importable ({e!r}); collectives are not annotated. "
            "Install it with: pip install 'nvtx==0.2.11'",
        )
        _push = _pop = _mark = _noop
        _emitter_kind = "none"
        return
    try:
        from nvtx._lib.lib import Domain, EventAttributes, StringHandle, mark, pop_range, push_range

        class _Message(StringHandle):
            # a registered string that is its own `.handle` (all EventAttributes reads of a message):
            # saves nvtx's Python RegisteredString wrapper on every call
            __slots__ = ()
            handle = property(lambda self: self)

        dom = Domain(_fmt.DOMAIN)
        h = dom.handle

        def push(msg, _E=EventAttributes, _M=_Message, _p=push_range, _h=h, _t=_tls):
            # one EventAttributes per thread, re-pointed at each message (nvtx copies it at the push);
            # not lru-cached like nvtx.annotate: messages are unique per call
            a = _t.attrs
            if a is None:
                a = _t.attrs = _E(_M(_h, msg), None)
            else:
                a.message = _M(_h, msg)
            _p(a, _h)

        def pop(_p=pop_range, _h=h):
            _p(_h)

        def mark_(msg, _E=EventAttributes, _M=_Message, _m=mark, _h=h):
            _m(_E(_M(_h, msg), None), _h)

        EventAttributes(_Message(h, "nsyscomm"), None).message = _Message(h, "nsyscomm")  # the API we expect
        if _fastpath is not None:  # the same two functions in C: no Python frame per push and pop
            _fastpath.nvtx_configure(EventAttributes, _Message, push_range, pop_range, h, _tls)
            push, pop = _fastpath.push, _fastpath.pop
        _domain_keepalive = dom
        _push, _pop, _mark = push, pop, mark_
        _emitter_kind = "nvtx-fast"
    except Exception:
        import nvtx

        def push(msg):
            nvtx.push_range(msg, domain=_fmt.DOMAIN)

        def pop():
            nvtx.pop_range(domain=_fmt.DOMAIN)

        def mark_(msg):
            nvtx.mark(msg, domain=_fmt.DOMAIN)

        _push, _pop, _mark = push, pop, mark_
        _emitter_kind = "nvtx-public"


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


def _caller() -> str:
    """``file:line function`` of the first frame outside torch and nsyscomm.

    A sys._getframe walk; the answer for each (code, instruction offset) is cached ("" = a frame to
    skip), so a call site costs one dict lookup instead of a line-table decode (f_lineno) and a format.
    The C fast path (_fastpath.c) walks the same cache and calls _site on a miss.
    """
    f = sys._getframe(2)
    sites = _call_sites
    while f is not None:
        site = sites.get((f.f_code, f.f_lasti))
        if site is None:
            site = _site(f)
        if site:
            return site
        f = f.f_back
    return ""


def _site(f) -> str:
    """The cached answer of _caller for one frame: its "file:line function", or "" to skip it."""
    code = f.f_code
    fn = code.co_filename
    # skipped too: code torch generates (fx graphs "<eval_with_key>.N ...", Inductor's output code)
    site = (
        ""
        if (fn.startswith(_skip_dirs) or fn.startswith(("<frozen", "<eval_with_key>")) or _GENERATED in fn)
        else f"{os.path.basename(fn)}:{f.f_lineno} {code.co_name}"
    )
    if len(_call_sites) > 100_000:  # code made at run time (exec) would grow it without bound
        _call_sites.clear()
    _call_sites[(code, f.f_lasti)] = site
    return site


def _dtype_name(dt) -> str:
    n = _dtype_names.get(dt)
    if n is None:
        n = str(dt).replace("torch.", "")
        _dtype_names[dt] = n
    return n


class _Group:
    # no reference to the ProcessGroup itself: the per-call caches hold _Groups, and a group
    # must die when torch destroys it (issue 26, _forget_groups)
    __slots__ = ("name", "size", "granks", "counter", "templates", "ranks")

    def __init__(self, pg):
        c10d = _c10d
        try:
            self.name = str(pg.group_name)
        except Exception:
            self.name = str(c10d._get_process_group_name(pg))
        self.size = pg.size()
        world = c10d.GroupMember.WORLD
        try:
            self.ranks = list(c10d.get_process_group_ranks(pg))
        except Exception:
            self.ranks = list(range(self.size))
        self.granks = () if pg is world else tuple(self.ranks)
        with _lock:
            self.counter = _seq.setdefault(self.name, itertools.count())
        self.templates = {}
        try:  # DeviceMesh's dimension names (group_desc "mesh_dp"), once per group
            desc = str(getattr(pg, "group_desc", "") or "")
            if desc and desc not in ("undefined", "default_pg"):
                _mark(_fmt.format_group_marker(self.name, desc))
        except Exception as e:
            _warn_once("group", f"nsyscomm: could not emit the group marker ({e!r})")

    def template(self, op, api, dtype):
        key = (op, api, dtype)
        t = self.templates.get(key)
        if t is None:
            t = _fmt.collective_template(op, api=api, dtype=dtype, pg=self.name, gsize=self.size, granks=self.granks)
            self.templates[key] = t
        return t

    def p2p_seq(self, peer_global):
        me = _global_rank()
        a, b = (me, peer_global) if me <= peer_global else (peer_global, me)
        key = (self.name, "p2p", a, b)
        c = _seq.get(key)
        if c is None:
            with _lock:
                c = _seq.setdefault(key, itertools.count())
        return next(c)


_MISSING = object()


def _group_or_none(pg):
    """The _Group of pg (None = the default group), or None for a rank outside pg; cached."""
    if pg is not None and pg is _c10d.GroupMember.NON_GROUP_MEMBER:
        return None
    g = _group(pg)
    if pg is None:
        _groups[None] = g  # dropped by the init/destroy_process_group wrappers
    return g


def _forget_groups(pg) -> None:
    """Drop the cache entries of the groups destroy_process_group(pg) destroyed (all of them for
    the default group), so that nsyscomm holds no ProcessGroup past its destruction. Held, a
    gloo group outlived the job's teardown and was destroyed at interpreter exit instead, where
    it could abort the rank (issue 26: "terminate called without an active exception")."""
    with _lock:
        if pg is None or pg is _c10d.GroupMember.WORLD or _c10d.GroupMember.WORLD is None:
            _groups.clear()
        else:
            _groups.pop(pg, None)
            _groups.pop(None, None)


def _group(pg):
    if pg is None:
        pg = _c10d.GroupMember.WORLD
        if pg is None:
            pg = _c10d._get_default_group()
    g = _groups.get(pg)
    if g is None:
        g = _Group(pg)
        _groups[pg] = g
    return g


def _global_rank():
    try:
        return _c10d.get_rank()
    except Exception:
        return -1


def _nbytes(t):
    return t.numel() * t.element_size()


def _flat(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flat(y)
    elif x is not None and hasattr(x, "numel"):
        yield x


def _sum_bytes(x):
    b = n = 0
    dt = None
    for t in _flat(x):
        n += t.numel()
        b += t.numel() * t.element_size()
        if dt is None:
            dt = t.dtype
    return b, n, dt


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


def step(i: int):
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
        _set_step((_step or 0) + 1)


# ---------------------------------------------------------------- layer 1: Python wrappers


def _compose(g, op, api, dt, nbytes, numel, seq, asy, peer=None):
    """The NVTX message of one call of group g (the process's rank marker goes first, once).
    The hot wrapper and _fastpath.c build the same message inline from a cached template."""
    if not _rank_marked:
        _emit_rank_marker()
    st = _step
    msg = g.template(op, api, _dtype_name(dt) if dt is not None else "") % (
        nbytes,
        numel,
        seq,
        asy,
        "" if st is None else st,
        _caller(),
    )
    return msg if peer is None else _fmt.with_peer(msg, peer)


def _arg(args, kwargs, idx, kw, default=None):
    if idx is not None and len(args) > idx:
        return args[idx]
    return kwargs.get(kw, default)


def _call_below(fn, args, kwargs, tls, rf, pushed):
    """Run the wrapped call below autograd (so the dispatcher layer does not annotate it again),
    with inner collectives passing through; then close what the wrapper opened."""
    tls.busy = True
    done = False
    try:
        with _Below():
            r = fn(*args, **kwargs)
        done = True
        return r
    finally:
        tls.busy = False
        if rf is not None:
            _rf_close(rf)
        if pushed:
            try:
                if not done:
                    _raising()
                _pop()
            except Exception as e:
                _warn_once("pop", f"nsyscomm: NVTX pop failed ({e!r})")


def _make_wrapper(
    fn,
    api,
    op,
    size_rule,
    t_idx,
    t_kw,
    g_idx,
    g_kw,
    a_idx=None,
    a_kw="async_op",
    always_async=False,
    p2p=None,
    funcol=False,
):
    """Build a wrapper. size_rule: t | t_n | list | list_n | none | obj."""

    def message(args, kwargs):
        if funcol:
            g = _funcol_group(_arg(args, kwargs, g_idx, g_kw), _arg(args, kwargs, g_idx + 1, "tag", ""))
        else:
            pg = _arg(args, kwargs, g_idx, g_kw)
            if pg is not None and pg is _c10d.GroupMember.NON_GROUP_MEMBER:
                return None
            g = _group(pg)
        if size_rule == "t" or size_rule == "t_n":
            t = _arg(args, kwargs, t_idx, t_kw)
            numel = t.numel()
            nbytes = numel * t.element_size()
            dt = t.dtype
            if size_rule == "t_n":
                nbytes *= g.size
                numel *= g.size
        elif size_rule == "list" or size_rule == "list_n":
            nbytes, numel, dt = _sum_bytes(_arg(args, kwargs, t_idx, t_kw))
            if size_rule == "list_n":
                nbytes *= g.size
                numel *= g.size
        elif size_rule == "obj":
            nbytes, numel, dt = "", "", None
        else:
            nbytes, numel, dt = 0, 0, None
        if always_async:
            asy = "1"
        else:
            asy = "1" if _arg(args, kwargs, a_idx, a_kw, False) else "0"
        peer = None
        if p2p is not None:
            peer = p2p(args, kwargs, g)
            seq = g.p2p_seq(peer)
        else:
            seq = next(g.counter)
        return _compose(g, op, _tls.api or api, dt, nbytes, numel, seq, asy, peer)

    def wrapper(*args, **kwargs):
        tls = _tls
        if not _enabled or tls.busy:
            return fn(*args, **kwargs)
        if funcol and _is_compiling():
            return fn(*args, **kwargs)
        pushed = False
        rf = None
        try:
            msg = message(args, kwargs)
            if msg is not None:
                _push(msg)
                pushed = True
                if _prof._is_profiler_enabled:
                    rf = _rf_enter(msg, None)
        except Exception as e:
            _warn_once(api, f"nsyscomm: could not annotate {api} ({e!r}); this call is not annotated")
        return _call_below(fn, args, kwargs, tls, rf, pushed)

    if size_rule == "t" and p2p is None and not funcol and not always_async:
        # hot path (all_reduce, broadcast, reduce, *_single): the message is built inline (no generic
        # branches, one template per (group, dtype)); every statement here is per-call overhead
        tmpls = {}

        def wrapper(*args, **kwargs):  # noqa: F811
            tls = _tls
            if not _enabled or tls.busy:
                return fn(*args, **kwargs)
            pushed = False
            rf = None
            try:
                n = len(args)
                pg = args[g_idx] if n > g_idx else kwargs.get(g_kw)
                g = _groups.get(pg, _MISSING)
                if g is _MISSING:
                    g = _group_or_none(pg)
                if g is not None:
                    t = args[t_idx] if n > t_idx else kwargs[t_kw]
                    numel = t.numel()
                    dt = t.dtype
                    tm = tmpls.get((g, dt))
                    if tm is None:
                        tm = tmpls[(g, dt)] = g.template(op, api, _dtype_name(dt))
                    if not _rank_marked:
                        _emit_rank_marker()
                    st = _step
                    msg = tm % (
                        numel * t.element_size(),
                        numel,
                        next(g.counter),
                        "1" if (args[a_idx] if n > a_idx else kwargs.get(a_kw)) else "0",
                        "" if st is None else st,
                        _caller(),
                    )
                    _push(msg)
                    pushed = True
                    if _prof._is_profiler_enabled:
                        rf = _rf_enter(msg, None)
            except Exception as e:
                _warn_once(api, f"nsyscomm: could not annotate {api} ({e!r}); this call is not annotated")
            return _call_below(fn, args, kwargs, tls, rf, pushed)

        if _fastpath is not None and os.environ.get("NSYSCOMM_FASTPATH", "1") != "0":
            # the same wrapper's steady state in C (_fastpath.c); it falls back to this one
            slow = wrapper
            wrapper = _fastpath.Hot(fn, slow, globals(), tmpls, api, t_idx, t_kw, g_idx, g_kw, a_idx, a_kw)
            wrapper._slow = slow

    wrapper.__wrapped__ = fn
    wrapper.__name__ = getattr(fn, "__name__", api)
    wrapper.__qualname__ = getattr(fn, "__qualname__", api)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__module__ = getattr(fn, "__module__", None)
    wrapper._nsyscomm = True
    return wrapper


def _is_compiling():
    try:
        return _torch.compiler.is_compiling()
    except Exception:
        return False


def _funcol_group(group, tag):
    fc = sys.modules["torch.distributed._functional_collectives"]
    name = fc._resolve_group_name(group, tag or "")
    pg = _c10d._resolve_process_group(name)
    return _group(pg)


def _peer_send(args, kwargs, g):
    dst = _arg(args, kwargs, 1, "dst")
    if dst is None:
        gd = kwargs.get("group_dst")
        dst = g.ranks[gd] if gd is not None else -1
    return dst


def _peer_recv(args, kwargs, g):
    src = _arg(args, kwargs, 1, "src")
    if src is None:
        gs = kwargs.get("group_src")
        src = g.ranks[gs] if gs is not None else -1
    return src


# api -> (op, size_rule, tensor idx, tensor kw, group idx, group kw, async idx, extra)
_C10D_SPECS = {
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
    "send": ("send", "t", 0, "tensor", 2, "group", None, {"p2p": _peer_send}),
    "recv": ("recv", "t", 0, "tensor", 2, "group", None, {"p2p": _peer_recv}),
    "isend": ("send", "t", 0, "tensor", 2, "group", None, {"p2p": _peer_send, "always_async": True}),
    "irecv": ("recv", "t", 0, "tensor", 2, "group", None, {"p2p": _peer_recv, "always_async": True}),
    "broadcast_object_list": ("broadcast", "obj", None, None, 2, "group", None, {}),
    "all_gather_object": ("all_gather", "obj", None, None, 2, "group", None, {}),
    "gather_object": ("gather", "obj", None, None, 3, "group", None, {}),
    "scatter_object_list": ("scatter", "obj", None, None, 3, "group", None, {}),
    "send_object_list": ("send", "obj", None, None, 2, "group", None, {}),
    "recv_object_list": ("recv", "obj", None, None, 2, "group", None, {}),
}

# functional collectives: api -> (op, size_rule, tensor idx, tensor kw, group idx)
_FUNCOL_SPECS = {
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

_KEEP = ("isend", "irecv")  # identity-checked by P2POp / batch_isend_irecv: stay wrapped (pass-through when off)


def _patch(owner, name, new):
    orig = getattr(owner, name)
    setattr(owner, name, new)
    _patched.append((owner, name, orig, new))


def _install_layer1():
    import torch.distributed as dist

    c10d = _c10d
    made = {}
    for api, (op, rule, ti, tk, gi, gk, ai, extra) in _C10D_SPECS.items():
        orig = getattr(c10d, api, None)
        if orig is None or getattr(orig, "_nsyscomm", False):
            continue
        w = _make_wrapper(orig, api, op, rule, ti, tk, gi, gk, ai, "async_op", **extra)
        made[api] = (orig, w)
        _patch(c10d, api, w)
        if getattr(dist, api, None) is orig:
            _patch(dist, api, w)
    # batch_isend_irecv: the per-op isend/irecv ranges carry api=batch_isend_irecv
    orig_batch = getattr(c10d, "batch_isend_irecv", None)
    if orig_batch is not None and not getattr(orig_batch, "_nsyscomm", False):
        origs = {id(made[k][0]): made[k][1] for k in ("isend", "irecv") if k in made}

        def batch_isend_irecv(p2p_op_list):
            if not _enabled or _tls.busy:
                return orig_batch(p2p_op_list)
            try:
                # P2POps built with the unwrapped isend/irecv (before annotate) would fail torch's
                # `op.op is isend` test: point them at the wrappers, which are what `isend` now names.
                fixed = [
                    o
                    if id(o.op) not in origs
                    else c10d.P2POp(origs[id(o.op)], o.tensor, None, o.group, o.tag, group_peer=o.group_peer)
                    for o in p2p_op_list
                ]
            except Exception:
                fixed = p2p_op_list
            _tls.api = "batch_isend_irecv"
            try:
                return orig_batch(fixed)
            finally:
                _tls.api = None

        batch_isend_irecv.__wrapped__ = orig_batch
        batch_isend_irecv._nsyscomm = True
        batch_isend_irecv.__doc__ = orig_batch.__doc__
        _patch(c10d, "batch_isend_irecv", batch_isend_irecv)
        if getattr(dist, "batch_isend_irecv", None) is orig_batch:
            _patch(dist, "batch_isend_irecv", batch_isend_irecv)
    # init_process_group: emit the rank marker once the rank is known
    orig_init = c10d.init_process_group
    if not getattr(orig_init, "_nsyscomm", False):

        def init_process_group(*args, **kwargs):
            _groups.pop(None, None)
            r = orig_init(*args, **kwargs)
            if _enabled:
                _emit_rank_marker()
            return r

        init_process_group.__wrapped__ = orig_init
        init_process_group._nsyscomm = True
        init_process_group.__doc__ = orig_init.__doc__
        _patch(c10d, "init_process_group", init_process_group)
        if getattr(dist, "init_process_group", None) is orig_init:
            _patch(dist, "init_process_group", init_process_group)
    orig_destroy = c10d.destroy_process_group
    if not getattr(orig_destroy, "_nsyscomm", False):

        def destroy_process_group(*args, **kwargs):
            _groups.pop(None, None)
            grp = args[0] if args else kwargs.get("group")
            if _profile_hook is not None and (grp is None or grp is c10d.GroupMember.WORLD):
                _profile_hook.finish()  # the default group goes away: write the trace while the rank is known
            try:
                return orig_destroy(*args, **kwargs)
            finally:
                _forget_groups(grp)

        destroy_process_group.__wrapped__ = orig_destroy
        destroy_process_group._nsyscomm = True
        destroy_process_group.__doc__ = orig_destroy.__doc__
        _patch(c10d, "destroy_process_group", destroy_process_group)
        if getattr(dist, "destroy_process_group", None) is orig_destroy:
            _patch(dist, "destroy_process_group", destroy_process_group)
    # functional collectives
    try:
        import torch.distributed._functional_collectives as fc
    except Exception:
        fc = None
    if fc is not None:
        for api, (op, rule, ti, tk, gi) in _FUNCOL_SPECS.items():
            orig = getattr(fc, api, None)
            if orig is None or getattr(orig, "_nsyscomm", False):
                continue
            w = _make_wrapper(
                orig, "funcol." + api, op, rule, ti, tk, gi, "group", None, always_async=True, funcol=True
            )
            _patch(fc, api, w)


# ---------------------------------------------------------------- layer 2: dispatcher catch-all

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
    if _tls.api:
        return _tls.api
    f = sys._getframe(2)
    known = _ddp_code
    while f is not None:
        code = f.f_code
        ddp = known.get(code)
        if ddp is None:
            fn = code.co_filename
            # the C++ reducer runs from autograd's backward; bucket broadcasts from DDP's Python
            ddp = known[code] = fn.endswith(_DDP_FILE) or (_AUTOGRAD_DIR in fn and fn.startswith(_skip_dirs))
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
    if not isinstance(pg, _c10d.ProcessGroup):
        pg = _c10d._resolve_process_group(pg)
    g = _group(pg)
    nbytes, numel, dt = _sum_bytes(args[ti])
    if times_n:
        nbytes *= g.size
        numel *= g.size
    return _compose(g, op, "_c10d_functional." + name, dt, nbytes, numel, next(g.counter), "1")


def _tracing(args) -> bool:
    """A call being traced (torch.compile, make_fx), not a collective that runs: its tensors are
    fake or functional (tensor subclasses). A plain tensor is a real call, even with a dispatch
    mode active (AOTAutograd runs a compiled graph's first call under one)."""
    try:
        T = _torch.Tensor
        for a in args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(t, T) and type(t) is not T and not isinstance(t, _torch.nn.Parameter):
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
        if isinstance(a, _c10d.ProcessGroup):
            pg, pg_pos = a, i
            break
    g = _group(pg)
    if ti is None:
        nbytes, numel, dt = 0, 0, None
    else:
        nbytes, numel, dt = _sum_bytes(args[ti])
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
    return _compose(g, op, _dispatch_api(name), dt, nbytes, numel, seq, "1", peer)


def _make_kernel(name, opov, message=None):
    message = message or _dispatch_message
    functional = message is _funcol_op_message

    def kernel(*args, **kwargs):
        pushed = False
        rf = None
        if _enabled and not (functional and _tracing(args)):
            try:
                msg = message(name, args)
                _push(msg)
                pushed = True
                if _prof._is_profiler_enabled:
                    rf = _rf_enter(msg, None)
            except Exception as e:
                _warn_once("c10d." + name, f"nsyscomm: could not annotate c10d::{name} ({e!r})")
        done = False
        try:
            with _Below():
                r = opov(*args, **kwargs)
            done = True
            return r
        finally:
            if rf is not None:
                _rf_close(rf)
            if pushed:
                try:
                    if not done:
                        _raising()
                    _pop()
                except Exception:
                    pass

    return kernel


def _install_layer2():
    global _lib
    torch = _torch
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
                _warn_once("impl" + name + key, f"nsyscomm: no dispatcher hook for c10d::{name} on {key} ({e!r})")
    # functional collectives as ops (torch.compile'd code); ops whose own autograd kernel is
    # registered per backend are left alone (ours would replace it)
    try:
        flib = torch.library.Library("_c10d_functional", "IMPL")
    except Exception as e:
        flib = None
        _warn_once("impl_funcol", f"nsyscomm: no dispatcher hook for _c10d_functional ops ({e!r})")
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
                _warn_once(
                    "impl" + name + key, f"nsyscomm: no dispatcher hook for _c10d_functional::{name} on {key} ({e!r})"
                )
    _lib = (lib, flib) if flib is not None else (lib,)
    return n


# ---------------------------------------------------------------- annotate


def _parse_capture(text):
    try:
        a, _, b = text.partition(":")
        a = int(a) if a.strip() else 0
        b = int(b) if b.strip() else 1 << 62
        return (a, b)
    except Exception:
        _warn_once("steps", f"nsyscomm: ignoring NSYSCOMM_CAPTURE_STEPS={text!r} (expected A:B)")
        return None


def annotate(enable: bool = True, *, ddp: bool = True):
    """Turn the NVTX annotation of collectives on (default) or off. Idempotent and thread-safe.

    ``ddp=False`` skips the dispatcher-level layer (DDP's reducer calls are then not annotated).
    Returns True when annotation is active after the call.
    """
    global _enabled, _installed, _torch, _c10d, _Below, _skip_dirs, _capture, _opt_hook, _lib, _step, _push, _pop
    global _raising
    global _prof, _rf_enter, _rf_exit, _profile_hook
    with _lock:
        if not enable:
            if not _installed:
                return False
            _enabled = False
            for owner, name, orig, new in reversed(_patched):
                if name in _KEEP and owner.__name__.endswith("distributed_c10d"):
                    continue  # P2POps may hold the wrapper: torch compares `op.op is isend`
                if getattr(owner, name, None) is new:
                    setattr(owner, name, orig)
            _patched[:] = [p for p in _patched if p[1] in _KEEP and p[0].__name__.endswith("distributed_c10d")]
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
            return False
        if _enabled:
            return True
        try:
            import torch
            import torch.distributed as dist

            if not dist.is_available():
                _warn_once("dist", "nsyscomm: torch.distributed is not available; nothing to annotate")
                return False
            import torch.distributed.distributed_c10d as c10d
        except Exception as e:
            _warn_once("torch", f"nsyscomm: torch is not importable ({e!r}); nothing to annotate")
            return False
        try:
            _torch, _c10d = torch, c10d
            _Below = torch._C._AutoDispatchBelowAutograd
            _check_fast_guard(torch)
            _bind_profiler(torch)
            if os.environ.get("NSYSCOMM_PROFILER") == "torch" and _profile_hook is None:
                from nsyscomm.capture import torch_profile

                _profile_hook = torch_profile if torch_profile.configure() else None
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            _skip_dirs = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, here + os.sep)
            if _push is _noop and _emitter_kind == "none":
                _init_emitter()
                # issue 22: every push/pop also writes the flight record (NSYSCOMM_RECORD_DIR)
                from nsyscomm.capture import flight_record

                _push, _pop, _raising = flight_record.chain(_push, _pop)
            if os.environ.get("NSYSCOMM_CAPTURE_STEPS"):
                _capture = _parse_capture(os.environ["NSYSCOMM_CAPTURE_STEPS"])
            _patched[:] = [p for p in _patched if getattr(p[0], p[1], None) is p[3]]
            _install_layer1()
            if ddp:
                _install_layer2()
            try:
                from torch.optim.optimizer import register_optimizer_step_post_hook

                _opt_hook = register_optimizer_step_post_hook(_optimizer_post_hook)
            except Exception as e:
                _warn_once("optim", f"nsyscomm: no automatic step detection ({e!r}); call nsyscomm.step(i)")
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


def _check_fast_guard(torch):
    """Let _fastpath hold c10's ExcludeDispatchKeyGuard itself (no pybind object per call), but only
    when, in this torch, it excludes exactly what _AutoDispatchBelowAutograd excludes and restores
    the thread's state; else _fastpath enters the Python guard."""
    global _fast_guard
    _fast_guard = False
    if _fastpath is None:
        return
    _fastpath.unconfigure()
    try:
        tls_excluded = torch._C._dispatch_tls_local_exclude_set
        outside = tls_excluded().raw_repr()
        with torch._C._AutoDispatchBelowAutograd():
            inside = tls_excluded().raw_repr()
        lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
        if not os.path.exists(lib) or not _fastpath.configure(lib, inside & ~outside):
            return
        got = _fastpath.guarded(lambda: tls_excluded().raw_repr())
        if got == inside and tls_excluded().raw_repr() == outside:
            _fast_guard = True
        else:
            _fastpath.unconfigure()
    except Exception:
        _fastpath.unconfigure()


def _bind_profiler(torch):
    """Bind the record_function ops; without them the flag object says 'never profiling'."""
    global _prof, _rf_enter, _rf_exit
    try:
        import torch.autograd.profiler as prof

        prof._is_profiler_enabled  # noqa: B018 (the flag exists in this torch)
        _rf_enter = torch.ops.profiler._record_function_enter_new
        _rf_exit = torch.ops.profiler._record_function_exit._RecordFunction
        _prof = prof
    except Exception as e:
        _prof = _ProfilerOff
        _warn_once("prof", f"nsyscomm: no record_function ranges under torch.profiler ({e!r})")


def _reset_for_tests():
    """Forget counters, step and markers (tests only)."""
    global _step, _explicit_step, _first_optimizer, _rank_marked
    with _lock:
        _seq.clear()
        _groups.clear()
        _step = None
        _explicit_step = False
        _first_optimizer = None
        _rank_marked = False
