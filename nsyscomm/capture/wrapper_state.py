"""What the capture layers read of the wrapper's state, typed, and the one way they close a call.

The state lives in nsyscomm.capture.wrapper's module namespace: the C fast path reads it there by
name, annotate() rebinds it (the emitter, the profiler ops), and tests patch it. Each layer
(python_layer, dispatch_layer, completion, groups, pipeline_steps) is handed that module once,
when annotate() installs it, and reads the state when a call runs, so that a change is seen
without a copy. ``WrapperState`` names what the layers read and its type: mypy checks the wrapper
module against it where annotate() hands the module over, and every read in the layers against
it. It is a static description only; a read is the same module-attribute read as without it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, Protocol


class ThreadState(Protocol):
    """The wrapper's per-thread flags (wrapper._TLS)."""

    busy: bool  # inside an annotated call on this thread: inner calls pass through
    api: str | None  # the api label for dispatcher calls made by a Python-layer wrapper


class WrapperState(Protocol):
    """The wrapper module as the layers see it (read-only: annotate() alone rebinds these)."""

    @property
    def _enabled(self) -> bool: ...
    @property
    def _tls(self) -> ThreadState: ...
    @property
    def _torch(self) -> ModuleType: ...
    @property
    def _c10d(self) -> ModuleType: ...
    @property
    def _Below(self) -> Callable[[], AbstractContextManager[Any]]: ...
    @property
    def _fastpath(self) -> ModuleType | None: ...
    @property
    def _patched(self) -> list[tuple[Any, str, Any, Any]]: ...
    @property
    def _skip_dirs(self) -> tuple[str, ...]: ...
    @property
    def _step(self) -> int | None: ...
    @property
    def _explicit_step(self) -> bool: ...
    @property
    def _rank_marked(self) -> bool: ...
    @property
    def _profile_hook(self) -> ModuleType | None: ...

    # the emitter: the call's range, the completion marks, the wait ranges (wrapper._init_emitter)
    @property
    def _push(self) -> Callable[[str], object]: ...
    @property
    def _pop(self) -> Callable[[], object]: ...
    @property
    def _raising(self) -> Callable[[], object]: ...
    @property
    def _mark(self) -> Callable[[str], object]: ...
    @property
    def _wpush(self) -> Callable[[str], object]: ...
    @property
    def _wpop(self) -> Callable[[], object]: ...

    # torch.profiler: its enabled flag, and the record_function op that opens a range
    @property
    def _prof(self) -> Any: ...
    @property
    def _rf_enter(self) -> Callable[[str, None], Any]: ...

    def _rf_close(self, handle: Any) -> None: ...
    def _warn_once(self, key: str, text: str) -> None: ...
    def _caller(self) -> str: ...
    def _emit_rank_marker(self) -> None: ...
    def _set_step(self, i: int) -> None: ...
    def _compose(
        self, g: Any, op: str, api: str, dt: Any, nbytes: Any, numel: Any, seq: int, asy: str, peer: int | None = None
    ) -> str: ...


def close_call(w: WrapperState, rf: Any, pushed: bool, done: bool) -> None:
    """Close what a layer opened around one call: the profiler range rf (when one was opened) and
    the NVTX range (when pushed), flagged as left by an exception when the call did not complete
    (done false). A failure is warned once per process, under the key and with the text of the C
    fast path's own warning, and never raises into the program."""
    if rf is not None:
        w._rf_close(rf)
    if pushed:
        try:
            if not done:
                w._raising()
            w._pop()
        except Exception as e:
            w._warn_once("pop", f"nsyscomm: NVTX pop failed ({e!r})")
