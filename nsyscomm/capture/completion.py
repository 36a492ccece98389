"""When an asynchronous call's work ran, and when its caller waited for it.

A call that returns a Work or a future (``async_op=True``, ``isend``/``irecv``, DDP's reducer
buckets, the functional collectives) only enqueues its work: on a backend without device kernels
(gloo, MPI) the work runs later on the backend's thread, and the NVTX range around the call is
only the enqueue. So, for those calls and only those (the synchronous path pays nothing):

- ``track(work, ident)`` chains a callback on the Work's future. The backend completes the
  future on its own thread when the work is done; the callback emits the mark
  ``nsyscomm.done|<ident>`` there (nvtx_format.py). Python runs the callback once that thread
  holds the GIL, so the mark may trail the completion while the caller's thread runs Python;
  the ingest bounds it by the caller's wait where there is one.
- ``Work.wait`` and the functional collectives' ``wait_tensor`` are wrapped: around a wait for
  a tracked call, a range ``nsyscomm.wait|<ident>`` (the caller blocked on its own
  communication). A wait for a call nsyscomm did not see runs untouched.
- DDP's reducer waits for its buckets in C++, in its finalize: an autograd final callback it
  queues once the last bucket is launched, run when backward's work is done. ``backward_wait``
  queues a final callback at the backward's first bucket, so it runs just before the finalize
  and opens a ``nsyscomm.wait`` range per bucket; it queues one more, which runs just after the
  finalize and closes them (the engine runs callbacks queued while it runs them, in order).

Device backends (NCCL) complete the future at the enqueue, their kernels are the truth: their
groups are not tracked (groups.Group.tracked). The ranges here go straight to NVTX, not through
the flight record, which records calls, not waits (wrapper._wpush and _wpop).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from nsyscomm import nvtx_format as _fmt
from nsyscomm.capture.wrapper_state import WrapperState

W: WrapperState  # nsyscomm.capture.wrapper, set by install()
_work_ident: Any = weakref.WeakKeyDictionary()  # Work -> ident, for its wait
_tensor_ident: dict = {}  # functional collective's output storage (data_ptr) -> ident, until waited
_MAX_IN_FLIGHT = 10_000
_patched: list = []  # (owner, name, original)


def _on_done(ident: str):
    msg = _fmt.format_done(ident)

    def done(_fut):
        # on the backend's thread; never raises into it
        try:
            W._mark(msg)
        except Exception:
            pass

    return done


def track(result: Any, ident: str) -> None:
    """Mark the completion of the work result stands for (a Work, a (tensors, Work) pair from the
    dispatcher, or a functional collective's tensor) and remember its identity for the wait."""
    work = result
    if isinstance(result, tuple) and result:
        work = result[-1]
    if isinstance(work, W._torch.Tensor):
        t = getattr(work, "elem", None)  # AsyncCollectiveTensor holds the collective's output
        if t is None or getattr(work, "completed", False):
            # a plain tensor: the call waited for its own work before it returned (all_gather's
            # chunk and cat along a dim other than 0), nothing is in flight; its storage kept
            # here would hand a later call's wait, on memory the allocator reused, to this one
            return
        if len(_tensor_ident) > _MAX_IN_FLIGHT:  # outputs never waited for (torch warns of those)
            _tensor_ident.clear()
        _tensor_ident[_storage(t)] = ident
        return
    if work is None:
        return
    if not hasattr(work, "get_future"):
        # the dispatcher hands a TorchScript object: the pybind Work is its unboxed form
        work = W._c10d.Work.unbox(work)
    else:
        try:
            _work_ident[work] = ident
        except TypeError:
            pass
    try:
        fut = work.get_future()
    except RuntimeError:  # a Work without a future (gloo's send and recv): its wait ends it
        return
    fut.then(_on_done(ident))


_backward_buckets: list = []  # idents of the DDP buckets launched in the running backward


def _queue_final(callback: Any) -> None:
    """Run callback at the end of the running backward, after the final callbacks queued before it."""
    W._torch.autograd.Variable._execution_engine.queue_callback(callback)


def backward_wait(ident: str) -> None:
    """Time the wait for DDP bucket ident: the reducer's finalize at the end of this backward."""
    if not _backward_buckets:
        try:
            _queue_final(_open_bucket_waits)
        except Exception:  # not in a backward (a reducer driven by hand): its wait stays unseen
            return
    _backward_buckets.append(ident)


def _open_bucket_waits() -> None:
    idents = list(_backward_buckets)
    _backward_buckets.clear()
    opened = 0
    if W._enabled:
        try:
            for ident in idents:
                W._wpush(_fmt.format_wait(ident))
                opened += 1
        except Exception:
            pass
    if opened:
        try:
            _queue_final(lambda: _close_bucket_waits(opened))
        except Exception:  # never leave the ranges open: the wait then reads as zero length
            _close_bucket_waits(opened)


def _close_bucket_waits(opened: int) -> None:
    try:
        for _ in range(opened):
            W._wpop()
    except Exception:
        pass


def _storage(tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _ident_of_tensor(tensor) -> str | None:
    """The call whose output tensor's storage this is, forgotten at its first wait as torch's own
    registry of in-flight functional collectives does (AsyncCollectiveTensor's views wait on
    tensors of the same storage)."""
    try:
        return _tensor_ident.pop(_storage(tensor), None)
    except Exception:
        return None


def _wait_range(ident: str | None, fn, args, kwargs):
    if ident is None or not W._enabled:
        return fn(*args, **kwargs)
    push, pop = W._wpush, W._wpop
    try:
        push(_fmt.format_wait(ident))
    except Exception:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    finally:
        try:
            pop()
        except Exception:
            pass


def install(wrapper: WrapperState) -> None:
    """Wrap Work.wait and the functional collectives' wait_tensor (once per process)."""
    global W
    W = wrapper
    if _patched:
        return
    work_cls = W._c10d.Work
    orig_wait = work_cls.wait

    def wait(self, *args, **kwargs):
        return _wait_range(_work_ident.get(self), orig_wait, (self, *args), kwargs)

    work_cls.wait = wait
    _patched.append((work_cls, "wait", orig_wait))
    fc = sys.modules.get("torch.distributed._functional_collectives")
    orig_wt = getattr(fc, "wait_tensor", None)
    if fc is not None and orig_wt is not None:

        def wait_tensor(tensor, *args, **kwargs):
            if W._torch.compiler.is_compiling():  # traced: the graph's own wait, no lookup in it
                return orig_wt(tensor, *args, **kwargs)
            return _wait_range(_ident_of_tensor(tensor), orig_wt, (tensor, *args), kwargs)

        wait_tensor.__wrapped__ = orig_wt  # type: ignore[attr-defined]
        setattr(fc, "wait_tensor", wait_tensor)  # noqa: B010 (a module attribute mypy cannot see)
        _patched.append((fc, "wait_tensor", orig_wt))


def uninstall() -> None:
    for owner, name, orig in reversed(_patched):
        setattr(owner, name, orig)
    _patched.clear()
