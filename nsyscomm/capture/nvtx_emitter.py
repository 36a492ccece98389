"""The NVTX emitter of the wrapper: push, pop and mark in nsyscomm's domain, bound once when
annotate() runs (nsyscomm.capture.wrapper._init_emitter keeps them in its module state, which
the C fast path and the tests read and patch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsyscomm import nvtx_format as _fmt

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from types import ModuleType


def _noop(*_a):
    return None


def make(fastpath: ModuleType | None, tls: threading.local, warn_once: Callable[[str, str], None]) -> tuple:
    """(push, pop, mark, kind, domain to keep alive) emitting NVTX ranges and marks in nsyscomm's
    domain: nvtx <= 0.2.11's Cython API (in C through fastpath when it is built: no Python frame
    per push and pop), nvtx's public API otherwise, nothing without nvtx (warned once).
    tls: the wrapper's per-thread state (its EventAttributes is reused per thread)."""
    try:
        import nvtx  # noqa: F401
    except Exception as e:  # no nvtx: no annotation
        warn_once(
            "nvtx",
            f"nsyscomm: the nvtx package is not importable ({e!r}); collectives are not annotated. "
            "Install it with: pip install 'nvtx==0.2.11'",
        )
        return _noop, _noop, _noop, "none", None
    try:
        from nvtx._lib.lib import Domain, EventAttributes, StringHandle, mark, pop_range, push_range

        class _Message(StringHandle):
            # a registered string that is its own `.handle` (all EventAttributes reads of a message):
            # saves nvtx's Python RegisteredString wrapper on every call
            __slots__ = ()
            handle = property(lambda self: self)

        dom = Domain(_fmt.DOMAIN)
        h = dom.handle

        def push(msg, _E=EventAttributes, _M=_Message, _p=push_range, _h=h, _t=tls):
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
        if fastpath is not None:  # the same two functions in C: no Python frame per push and pop
            fastpath.nvtx_configure(EventAttributes, _Message, push_range, pop_range, h, tls)
            push, pop = fastpath.push, fastpath.pop
        return push, pop, mark_, "nvtx-fast", dom
    except Exception:
        import nvtx

        def public_push(msg):
            nvtx.push_range(msg, domain=_fmt.DOMAIN)

        def public_pop():
            nvtx.pop_range(domain=_fmt.DOMAIN)

        def public_mark(msg):
            nvtx.mark(msg, domain=_fmt.DOMAIN)

        return public_push, public_pop, public_mark, "nvtx-public", None
