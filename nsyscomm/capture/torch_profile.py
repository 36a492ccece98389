"""torch.profiler capture for ``nsyscomm run --profiler torch`` (machines without nsys).

The launcher sets ``NSYSCOMM_PROFILER=torch`` and ``NSYSCOMM_TRACE_DIR=DIR``; the startup hook's
``annotate()`` then hands this module to the wrapper, which calls:

- ``start(rank)`` when the rank is known (right after ``init_process_group``, or when the
  ``--steps A:B`` window opens): a ``torch.profiler.profile`` (CPU, plus CUDA when available)
  starts in this process;
- ``finish()`` when the default process group is destroyed, when the ``--steps`` window closes
  (step B begins), at exit (atexit) and on SIGTERM (torchrun stopping its workers): the profiler
  stops and the trace is written to ``DIR/rank<R>.json.gz`` (through a temporary name, so a
  half-written file is never taken for a trace).

While the profiler records, the wrapper adds a ``record_function`` range named with its NVTX
message to every collective (and the rank marker), so the Kineto trace carries the metadata
(nsyscomm.ingest.kineto.trace reads them as ``source='wrapper'`` rows). One trace per process: a
second ``init_process_group`` after ``finish()`` is not profiled again.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from nsyscomm import settings

_lock = threading.RLock()
_dir: str | None = None
_prof: Any = None  # the running torch.profiler.profile
_rank = None
_done = False
_atexit = False


def configure() -> bool:
    """Read the launcher's environment; True when a trace folder is set."""
    global _dir
    d = settings.trace_dir()
    if not d:
        sys.stderr.write("nsyscomm: NSYSCOMM_PROFILER=torch without NSYSCOMM_TRACE_DIR: no trace is written\n")
        return False
    _dir = d
    return True


def trace_path(rank: int) -> str:
    return os.path.join(_dir or ".", f"rank{rank}.json.gz")


def start(rank: int) -> None:
    """Start profiling this process (idempotent; never again after finish())."""
    global _prof, _rank, _atexit
    with _lock:
        if _prof is not None or _done or _dir is None:
            return
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile

            acts = _activities(torch, ProfilerActivity)
            # what the Kineto reader uses and nothing more: no shapes, stacks, memory or FLOPs
            p = profile(activities=acts, record_shapes=False, with_stack=False, profile_memory=False)
            with warnings.catch_warnings(), _user_scope_only():
                # torch's own notes ("Profiler clears events at the end of each cycle ...") are about
                # schedules nsyscomm does not use; they would land in the job's output
                warnings.simplefilter("ignore")
                p.start()
        except Exception as e:
            sys.stderr.write(f"nsyscomm: torch.profiler did not start ({e!r}); no trace for rank {rank}\n")
            return
        _prof, _rank = p, rank
        if not _atexit:
            atexit.register(finish)
            _atexit = True
        _install_sigterm()


@contextlib.contextmanager
def _user_scope_only() -> Iterator[None]:
    """While the profiler starts, have it record the user-scope ranges only.

    The CPU activity records every aten op by default, which slows a training loop markedly
    (docs/performance.md, "--profiler torch"). The Kineto reader needs only the ranges of
    ``record_function`` (the wrapper's ``nsyscomm`` ranges, c10d's ``nccl:*`` / ``gloo:*`` ranges),
    which are user scope, and the launches and kernels, which CUPTI records whatever the scopes.
    torch.profiler has no public option for scopes; its start calls
    ``torch.autograd.profiler._enable_profiler``, whose ``scopes`` argument does it, so that call
    gets the argument for the duration of the start. Any mismatch with the installed torch
    (no such function, no RecordScope) leaves the profiler as it was: everything is recorded.
    NSYSCOMM_TORCH_SCOPES=all does the same on purpose."""
    if settings.torch_scopes() == "all":
        yield
        return
    try:
        import torch.autograd.profiler as autograd_profiler
        from torch._C._profiler import RecordScope

        # torch's stub omits the scopes argument the function takes at run time
        enable: Callable[..., None] = autograd_profiler._enable_profiler
    except (ImportError, AttributeError):
        yield
        return

    def enable_user_scope(config, activities, scopes=None):
        return enable(config, activities, scopes or {RecordScope.USER_SCOPE})

    autograd_profiler._enable_profiler = enable_user_scope
    try:
        yield
    finally:
        autograd_profiler._enable_profiler = enable


def _activities(torch, activity) -> list:
    """CPU (the wrapper's and c10d's ranges, the launches) and, with a GPU, CUDA (the kernels).
    NSYSCOMM_TORCH_ACTIVITIES=cpu|cuda|cpu,cuda narrows them, for measuring what each costs
    (benchmarks/gpu_check.sh)."""
    want = settings.torch_activities()
    acts = [activity.CPU] if "cpu" in want else []
    try:
        if "cuda" in want and torch.cuda.is_available():
            acts.append(activity.CUDA)
    except Exception:
        pass
    return acts or [activity.CPU]


def finish() -> str | None:
    """Stop the profiler and write DIR/rank<R>.json.gz; returns the path (None when nothing ran)."""
    global _prof, _done
    with _lock:
        p, rank = _prof, _rank  # set together by start()
        if p is None or rank is None:
            return None
        _prof = None
        _done = True
        path = trace_path(rank)
        part = path[: -len(".json.gz")] + ".partial.gz"  # not *.json.gz: never read as a trace
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p.stop()
            p.export_chrome_trace(part)
            os.replace(part, path)
            return path
        except Exception as e:
            sys.stderr.write(f"nsyscomm: could not write the torch.profiler trace {path} ({e!r})\n")
            try:
                os.unlink(part)
            except OSError:
                pass
            return None


def _install_sigterm():
    """On SIGTERM (torchrun stopping the workers after a failure) write the trace, then die as before."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        old = signal.getsignal(signal.SIGTERM)
    except Exception:
        return
    if old not in (signal.SIG_DFL, None) and not callable(old):
        return

    def on_term(signum, frame):
        try:
            finish()
        finally:
            if callable(old):
                old(signum, frame)
            else:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except Exception:
        pass
