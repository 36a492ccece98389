"""Ranks that joined early under ``torch.distributed.algorithms.Join`` (uneven inputs).

A rank that runs out of inputs leaves its training loop and enters ``Join.__exit__``, which
repeats until every rank has joined: an all_reduce that counts the ranks not yet joined (matching
the all_reduce of ones each ``Joinable``'s ``notify_join_context`` issues per iteration on the
ranks still training), then each join hook's ``main_hook`` (DDP's ``_DDPJoinHook`` all_reduces
one bucket at a time to match the others' backward; ZeRO's broadcasts its shards), then the post
hooks (DDP syncs the final model from the last joiner). Those are shadow collectives: the joined
rank issues them only to match the others, so its waiting there is no one's lateness.

The wrapper holds a range ``nsyscomm.joined|step=N`` (nsyscomm/nvtx_format.py) over that exit on
the joining rank, N being its step when it joined (a record_function range too under
torch.profiler); the ingest marks the calls inside it (``collectives.joined``). torch imports the module with torch itself, so it is patched at once.
"""

from __future__ import annotations

import functools
import importlib

from nsyscomm import nvtx_format
from nsyscomm.capture.wrapper_state import WrapperState

MODULE = "torch.distributed.algorithms.join"

W: WrapperState  # nsyscomm.capture.wrapper, bound by install() before anything here runs


def _wrap(orig):
    @functools.wraps(orig)
    def __exit__(self, exc_type, exc, tb):
        # Join does nothing when disabled or when the loop raised: no shadow collectives then
        if not W._enabled or exc_type is not None or not getattr(self, "_enable", True):
            return orig(self, exc_type, exc, tb)
        msg = nvtx_format.format_joined(W._step or 0)
        W._push(msg)
        # under torch.profiler the same range as a record_function one (the Kineto trace's)
        rf = W._rf_enter(msg, None) if W._prof._is_profiler_enabled else None
        try:
            return orig(self, exc_type, exc, tb)
        finally:
            if rf is not None:
                W._rf_close(rf)
            W._pop()

    setattr(__exit__, "_nsyscomm", True)  # noqa: B010 (an attribute mypy does not know functions take)
    return __exit__


def install(wrapper: WrapperState) -> None:
    """Mark the calls a rank makes after it joined (Join.__exit__)."""
    global W
    W = wrapper
    cls = importlib.import_module(MODULE).Join
    orig = cls.__dict__.get("__exit__")
    if orig is None or getattr(orig, "_nsyscomm", False):
        return
    new = _wrap(orig)
    cls.__exit__ = new
    wrapper._patched.append((cls, "__exit__", orig, new))
