"""What annotate() binds from the torch it finds (nsyscomm.capture.wrapper): the C fast path's
autograd-key guard, used only where it does what torch's own guard does, and the profiler's
record_function ops, so that each annotated call is also a range in torch.profiler's traces."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any


def fast_guard(fastpath: ModuleType | None, torch: ModuleType) -> bool:
    """Let fastpath hold c10's ExcludeDispatchKeyGuard itself (no pybind object per call), but only
    when, in this torch, it excludes exactly what _AutoDispatchBelowAutograd excludes and restores
    the thread's state; else fastpath enters the Python guard. True when the C guard is in use."""
    if fastpath is None:
        return False
    fastpath.unconfigure()
    try:
        tls_excluded = torch._C._dispatch_tls_local_exclude_set
        outside = tls_excluded().raw_repr()
        with torch._C._AutoDispatchBelowAutograd():
            inside = tls_excluded().raw_repr()
        lib = os.path.join(os.path.dirname(torch.__file__ or ""), "lib", "libc10.so")
        if not torch.__file__ or not os.path.exists(lib) or not fastpath.configure(lib, inside & ~outside):
            return False
        got = fastpath.guarded(lambda: tls_excluded().raw_repr())
        if got == inside and tls_excluded().raw_repr() == outside:
            return True
        fastpath.unconfigure()
    except Exception:
        fastpath.unconfigure()
    return False


def profiler_ops(torch: ModuleType, off: Any, warn_once: Callable[[str, str], None]) -> tuple[Any, Any, Any]:
    """(torch.autograd.profiler, record_function enter op, exit op); (off, None, None) when this
    torch lacks them (warned once): `off` is a flag object that says "never profiling"."""
    try:
        import torch.autograd.profiler as prof

        prof._is_profiler_enabled  # noqa: B018 (the flag exists in this torch)
        return (
            prof,
            torch.ops.profiler._record_function_enter_new,
            torch.ops.profiler._record_function_exit._RecordFunction,
        )
    except Exception as e:
        warn_once("prof", f"nsyscomm: no record_function ranges under torch.profiler ({e!r})")
        return off, None, None
