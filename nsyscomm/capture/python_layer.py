"""Layer 1 of the wrapper (nsyscomm.capture.wrapper's docstring): Python wrappers in place of the
public functions of ``torch.distributed`` (the package namespace and ``distributed_c10d``) and of
``torch.distributed._functional_collectives``.

They know the exact API called, compute the nccl-tests message size (api_specs.py says how for
each function) and push one range around the original call, run below autograd so that layer 2
(dispatch_layer.py) does not annotate it again. The one-tensor calls have a hot wrapper whose
steady state is C (_fastpath.c). The wrappers read the wrapper module's state when they run:
install() is given that module instead of importing it, so the two do not import each other.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from nsyscomm import nvtx_format as _fmt
from nsyscomm import settings
from nsyscomm.capture import completion, groups
from nsyscomm.capture.api_specs import C10D_SPECS, FUNCOL_SPECS, arg
from nsyscomm.capture.wrapper_state import WrapperState, close_call

W: WrapperState  # nsyscomm.capture.wrapper, set by install()


def _call_below(fn, args, kwargs, tls, rf, pushed):
    """Run the wrapped call below autograd (so the dispatcher layer does not annotate it again),
    with inner collectives passing through; then close what the wrapper opened."""
    tls.busy = True
    done = False
    try:
        with W._Below():
            r = fn(*args, **kwargs)
        done = True
        return r
    finally:
        tls.busy = False
        if pushed or rf is not None:
            close_call(W, rf, pushed, done)


def make_wrapper(
    fn: Callable[..., Any],
    api: str,
    op: str,
    size_rule: str,
    t_idx: int | None,
    t_kw: str | None,
    g_idx: int,
    g_kw: str,
    a_idx: int | None = None,
    a_kw: str = "async_op",
    always_async: bool = False,
    p2p: Callable[[Sequence[Any], Mapping[str, Any], groups.Group], int] | None = None,
    funcol: bool = False,
) -> Callable[..., Any]:
    """Build a wrapper. size_rule: t | t_n | list | list_n | none | obj."""
    message = _message_of(api, op, size_rule, t_idx, t_kw, g_idx, g_kw, a_idx, a_kw, always_async, p2p, funcol)
    made: Any = _generic_wrapper(fn, api, message, funcol)
    one_tensor = size_rule == "t" and p2p is None and not funcol and not always_async
    if one_tensor and t_idx is not None and t_kw is not None and a_idx is not None:
        made = _hot_wrapper(fn, made, api, op, t_idx, t_kw, g_idx, g_kw, a_idx, a_kw)
    return _stands_for(made, fn, api)


def _message_of(api, op, size_rule, t_idx, t_kw, g_idx, g_kw, a_idx, a_kw, always_async, p2p, funcol):
    """The function that makes one call's (message, identity for its completion mark or None), or
    None for a call this process takes no part in (a group it is not a member of)."""

    def message(args, kwargs):
        if funcol:
            g = _funcol_group(arg(args, kwargs, g_idx, g_kw), arg(args, kwargs, g_idx + 1, "tag", ""))
        else:
            pg = arg(args, kwargs, g_idx, g_kw)
            if pg is not None and pg is W._c10d.GroupMember.NON_GROUP_MEMBER:
                return None
            g = groups.group(pg)
        if size_rule == "t" or size_rule == "t_n":
            t = arg(args, kwargs, t_idx, t_kw)
            numel = t.numel()
            nbytes = numel * t.element_size()
            dt = t.dtype
            if size_rule == "t_n":
                nbytes *= g.size
                numel *= g.size
        elif size_rule == "list" or size_rule == "list_n":
            nbytes, numel, dt = groups.sum_bytes(arg(args, kwargs, t_idx, t_kw))
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
            asy = "1" if arg(args, kwargs, a_idx, a_kw, False) else "0"
        peer = None
        if p2p is not None:
            peer = p2p(args, kwargs, g)
            seq = g.p2p_seq(peer)
        else:
            seq = next(g.counter)
        # an asynchronous call of a group without device kernels: its completion is marked
        ident = _fmt.format_ident(op, g.name, seq, peer) if asy == "1" and g.tracked else None
        return W._compose(g, op, W._tls.api or api, dt, nbytes, numel, seq, asy, peer), ident

    return message


def _generic_wrapper(fn, api, message, funcol):
    """The wrapper of every call: a range around it with message's text, and the completion of
    an asynchronous call marked."""

    def wrapper(*args, **kwargs):
        tls = W._tls
        if not W._enabled or tls.busy:
            return fn(*args, **kwargs)
        if funcol and _is_compiling():
            return fn(*args, **kwargs)
        pushed = False
        rf = None
        ident = None
        try:
            made = message(args, kwargs)
            if made is not None:
                msg, ident = made
                W._push(msg)
                pushed = True
                if W._prof._is_profiler_enabled:
                    rf = W._rf_enter(msg, None)
        except Exception as e:
            W._warn_once(api, f"nsyscomm: could not annotate {api} ({e!r}); this call is not annotated")
        r = _call_below(fn, args, kwargs, tls, rf, pushed)
        if ident is not None:
            track(r, ident, api)
        return r

    return wrapper


def _hot_wrapper(
    fn: Callable[..., Any],
    generic: Callable[..., Any],
    api: str,
    op: str,
    t_idx: int,
    t_kw: str,
    g_idx: int,
    g_kw: str,
    a_idx: int,
    a_kw: str,
) -> Any:
    """The wrapper of a synchronous one-tensor call (all_reduce, broadcast, reduce, *_single),
    with the message built inline from one template per (group, dtype) and no generic branches:
    every statement here runs on each call. An asynchronous call goes to generic (its completion
    is marked too). Its steady state runs in C where _fastpath is built (the same steps, reading
    the wrapper's state by name), falling back to this one."""
    tmpls: dict = {}
    # objects that live as long as the process, held by the closure (state that changes,
    # such as the emitter, the step and the enabled flag, is read from W at each call)
    tls_, by_pg, missing, caller, call_below = W._tls, groups.by_pg, groups.MISSING, W._caller, _call_below

    def wrapper(*args, **kwargs):
        tls = tls_
        if not W._enabled or tls.busy:
            return fn(*args, **kwargs)
        n = len(args)
        try:
            asy = args[a_idx] if n > a_idx else kwargs.get(a_kw)
            asy = asy is not None and asy is not False and bool(asy)
        except Exception:  # an async_op whose truth fails: the call goes on unannotated
            return fn(*args, **kwargs)
        if asy:
            return generic(*args, **kwargs)
        pushed = False
        rf = None
        try:
            pg = args[g_idx] if n > g_idx else kwargs.get(g_kw)
            g = by_pg.get(pg, missing)
            if g is missing:
                g = groups.group_or_none(pg)
            if g is not None:
                t = args[t_idx] if n > t_idx else kwargs[t_kw]
                numel = t.numel()
                dt = t.dtype
                tm = tmpls.get((g, dt))
                if tm is None:
                    tm = tmpls[(g, dt)] = g.template(op, api, groups.dtype_name(dt))
                if not W._rank_marked:
                    W._emit_rank_marker()
                st = W._step
                msg = tm % (
                    numel * t.element_size(),
                    numel,
                    next(g.counter),
                    "0",
                    "" if st is None else st,
                    caller(),
                )
                W._push(msg)
                pushed = True
                if W._prof._is_profiler_enabled:
                    rf = W._rf_enter(msg, None)
        except Exception as e:
            W._warn_once(api, f"nsyscomm: could not annotate {api} ({e!r}); this call is not annotated")
        return call_below(fn, args, kwargs, tls, rf, pushed)

    if W._fastpath is None or not settings.fastpath():
        return wrapper
    made = W._fastpath.Hot(fn, wrapper, vars(W), tmpls, api, t_idx, t_kw, g_idx, g_kw, a_idx, a_kw)
    made._slow = wrapper
    return made


def _stands_for(made: Any, fn: Callable[..., Any], api: str) -> Any:
    """made, named and documented as fn, marked as nsyscomm's (a second annotate() leaves it)."""
    made.__wrapped__ = fn
    made.__name__ = getattr(fn, "__name__", api)
    made.__qualname__ = getattr(fn, "__qualname__", api)
    made.__doc__ = getattr(fn, "__doc__", None)
    made.__module__ = getattr(fn, "__module__", None)
    made._nsyscomm = True
    return made


def track(result: object, ident: str, api: str) -> None:
    """Mark the completion of an asynchronous call's work (completion.py); a failure leaves the
    call timed by its enqueue (warned once), never raises into the program."""
    try:
        completion.track(result, ident)
    except Exception as e:
        W._warn_once("done" + api, f"nsyscomm: could not mark the completion of {api} ({e!r})")


def _is_compiling():
    try:
        return W._torch.compiler.is_compiling()
    except Exception:
        return False


def _funcol_group(group, tag):
    fc = sys.modules["torch.distributed._functional_collectives"]
    name = fc._resolve_group_name(group, tag or "")
    pg = W._c10d._resolve_process_group(name)
    return groups.group(pg)


KEEP = ("isend", "irecv")  # identity-checked by P2POp / batch_isend_irecv: stay wrapped (pass-through when off)


def _mark_wrapper(new, orig) -> None:
    """new stands for orig: functools.wraps' __wrapped__ and __doc__, and nsyscomm's own mark (a
    second annotate() does not wrap it again)."""
    for attr, value in (("__wrapped__", orig), ("__doc__", orig.__doc__), ("_nsyscomm", True)):
        setattr(new, attr, value)


def _patch(owner, name, new):
    orig = getattr(owner, name)
    setattr(owner, name, new)
    W._patched.append((owner, name, orig, new))


def _replace(c10d: ModuleType, dist: ModuleType, name: str, orig: Any, new: Any) -> None:
    """Put new in place of orig in distributed_c10d, and in torch.distributed when that name is
    the same function there (the package re-exports most of c10d's)."""
    _patch(c10d, name, new)
    if getattr(dist, name, None) is orig:
        _patch(dist, name, new)


def install(wrapper: WrapperState) -> None:
    """Wrap torch.distributed's public functions. wrapper: nsyscomm.capture.wrapper, whose state the
    wrappers read when they run (annotate() toggles it, tests patch the emitter)."""
    global W
    W = wrapper
    import torch.distributed as dist

    c10d = W._c10d
    made = {}
    for api, (op, rule, ti, tk, gi, gk, ai, extra) in C10D_SPECS.items():
        orig = getattr(c10d, api, None)
        if orig is None or getattr(orig, "_nsyscomm", False):
            continue
        w = make_wrapper(orig, api, op, rule, ti, tk, gi, gk, ai, "async_op", **extra)
        made[api] = (orig, w)
        _replace(c10d, dist, api, orig, w)
    # batch_isend_irecv: the per-op isend/irecv ranges carry api=batch_isend_irecv
    orig_batch = getattr(c10d, "batch_isend_irecv", None)
    if orig_batch is not None and not getattr(orig_batch, "_nsyscomm", False):
        origs = {id(made[k][0]): made[k][1] for k in ("isend", "irecv") if k in made}

        def batch_isend_irecv(p2p_op_list):
            if not W._enabled or W._tls.busy:
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
            W._tls.api = "batch_isend_irecv"
            try:
                return orig_batch(fixed)
            finally:
                W._tls.api = None

        _mark_wrapper(batch_isend_irecv, orig_batch)
        _replace(c10d, dist, "batch_isend_irecv", orig_batch, batch_isend_irecv)
    # init_process_group: emit the rank marker once the rank is known
    orig_init = c10d.init_process_group
    if not getattr(orig_init, "_nsyscomm", False):

        def init_process_group(*args, **kwargs):
            groups.by_pg.pop(None, None)
            r = orig_init(*args, **kwargs)
            if W._enabled:
                W._emit_rank_marker()
            return r

        _mark_wrapper(init_process_group, orig_init)
        _replace(c10d, dist, "init_process_group", orig_init, init_process_group)
    orig_destroy = c10d.destroy_process_group
    if not getattr(orig_destroy, "_nsyscomm", False):

        def destroy_process_group(*args, **kwargs):
            groups.by_pg.pop(None, None)
            grp = args[0] if args else kwargs.get("group")
            if W._profile_hook is not None and (grp is None or grp is c10d.GroupMember.WORLD):
                W._profile_hook.finish()  # the default group goes away: write the trace while the rank is known
            try:
                return orig_destroy(*args, **kwargs)
            finally:
                groups.forget_groups(grp)

        _mark_wrapper(destroy_process_group, orig_destroy)
        _replace(c10d, dist, "destroy_process_group", orig_destroy, destroy_process_group)
    # functional collectives
    fc: ModuleType | None
    try:
        import torch.distributed._functional_collectives as fc
    except Exception:
        fc = None
    if fc is not None:
        for api, (op, rule, ti, tk, gi) in FUNCOL_SPECS.items():
            orig = getattr(fc, api, None)
            if orig is None or getattr(orig, "_nsyscomm", False):
                continue
            w = make_wrapper(orig, "funcol." + api, op, rule, ti, tk, gi, "group", None, always_async=True, funcol=True)
            _patch(fc, api, w)
