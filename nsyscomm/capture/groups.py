"""The process groups the wrapper has seen: each group's name, size, ranks, call counter and
message templates, cached by ProcessGroup, and the message size of a call's tensors.

A cache entry holds no reference to the ProcessGroup itself beyond the dict key, and
forget_groups() drops the entries of the groups torch destroys, so that none outlives its
teardown. The counters are per group name, so a group torch rebuilds under the same name goes on
counting (seq is what ranks match on). The wrapper's state (c10d, the emitter) is read when a
group is first seen: bind() is given the wrapper module instead of importing it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

from nsyscomm import nvtx_format as _fmt
from nsyscomm.capture.wrapper_state import WrapperState

W: WrapperState  # nsyscomm.capture.wrapper, set by bind()

_lock = threading.RLock()
by_pg: dict = {}  # ProcessGroup -> Group (None: the default group; the C fast path reads it)
counters: dict = {}  # seq key -> itertools.count
dtype_names: dict = {}


def bind(wrapper: WrapperState) -> None:
    global W
    W = wrapper


def clear() -> None:
    """Forget every group and counter (tests only)."""
    with _lock:
        counters.clear()
        by_pg.clear()


def dtype_name(dt: Any) -> str:
    n = dtype_names.get(dt)
    if n is None:
        n = str(dt).replace("torch.", "")
        dtype_names[dt] = n
    return n


class Group:
    # no reference to the ProcessGroup itself: the per-call caches hold Groups, and a group
    # must die when torch destroys it (forget_groups)
    __slots__ = ("name", "size", "granks", "counter", "templates", "ranks", "tracked")

    def __init__(self, pg):
        c10d = W._c10d
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
            self.counter = counters.setdefault(self.name, itertools.count())
        self.templates = {}
        # the completion of its asynchronous calls is marked (completion.py) unless its backend
        # runs the work as device kernels, whose own times are the truth
        try:
            self.tracked = str(c10d.get_backend(pg)) not in ("nccl", "xccl")
        except Exception:
            self.tracked = True
        try:  # DeviceMesh's dimension names (group_desc "mesh_dp"), once per group
            desc = str(getattr(pg, "group_desc", "") or "")
            if desc and desc not in ("undefined", "default_pg"):
                W._mark(_fmt.format_group_marker(self.name, desc))
        except Exception as e:
            W._warn_once("group", f"nsyscomm: could not emit the group marker ({e!r})")

    def template(self, op: str, api: str, dtype: str) -> str:
        key = (op, api, dtype)
        t = self.templates.get(key)
        if t is None:
            t = _fmt.collective_template(op, api=api, dtype=dtype, pg=self.name, gsize=self.size, granks=self.granks)
            self.templates[key] = t
        return t

    def p2p_seq(self, peer_global: int) -> int:
        me = global_rank()
        a, b = (me, peer_global) if me <= peer_global else (peer_global, me)
        key = (self.name, "p2p", a, b)
        c = counters.get(key)
        if c is None:
            with _lock:
                c = counters.setdefault(key, itertools.count())
        return next(c)


MISSING = object()


def group_or_none(pg: Any) -> Group | None:
    """The Group of pg (None = the default group), or None for a rank outside pg; cached."""
    if pg is not None and pg is W._c10d.GroupMember.NON_GROUP_MEMBER:
        return None
    g = group(pg)
    if pg is None:
        by_pg[None] = g  # dropped by the init/destroy_process_group wrappers
    return g


def forget_groups(pg: Any) -> None:
    """Drop the cache entries of the groups destroy_process_group(pg) destroyed (all of them for
    the default group), so that nsyscomm holds no ProcessGroup past its destruction. Held, a
    gloo group outlived the job's teardown and was destroyed at interpreter exit instead, where
    it could abort the rank ("terminate called without an active exception")."""
    with _lock:
        if pg is None or pg is W._c10d.GroupMember.WORLD or W._c10d.GroupMember.WORLD is None:
            by_pg.clear()
        else:
            by_pg.pop(pg, None)
            by_pg.pop(None, None)


def group(pg: Any) -> Group:
    if pg is None:
        pg = W._c10d.GroupMember.WORLD
        if pg is None:
            pg = W._c10d._get_default_group()
    g = by_pg.get(pg)
    if g is None:
        g = Group(pg)
        by_pg[pg] = g
    return g


def global_rank() -> int:
    try:
        return W._c10d.get_rank()
    except Exception:
        return -1


def flat(x: Any) -> Iterator[Any]:
    """The tensors in x, a tensor or nested lists of them."""
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from flat(y)
    elif x is not None and hasattr(x, "numel"):
        yield x


def sum_bytes(x: Any) -> tuple[int, int, Any]:
    """(bytes, elements, first dtype) of the tensors in x."""
    b = n = 0
    dt = None
    for t in flat(x):
        n += t.numel()
        b += t.numel() * t.element_size()
        if dt is None:
            dt = t.dtype
    return b, n, dt
