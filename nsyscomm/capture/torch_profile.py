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

A program that runs its own torch.profiler keeps it: nsyscomm's stops before the program's
records (torch has one profiling session per process), and the rank's trace is then what the
program's profiler recorded (nsyscomm.capture.program_profile).
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
from nsyscomm.capture import program_profile

_lock = threading.RLock()
_dir: str | None = None
_prof: Any = None  # the running torch.profiler.profile (set before it starts)
_rank = None
_done = False
_atexit = False
_stood_down = False  # the program runs its own profiler: nsyscomm's never records again
_windows: list[str] = []  # the program's finished recordings, saved in the trace folder
_pending: list[Any] = []  # the program's finished recordings it has not exported (yet)


def configure() -> bool:
    """Read the launcher's environment and watch for the program's own profiler; True when a
    trace folder is set."""
    global _dir
    d = settings.trace_dir()
    if not d:
        sys.stderr.write("nsyscomm: NSYSCOMM_PROFILER=torch without NSYSCOMM_TRACE_DIR: no trace is written\n")
        return False
    _dir = d
    program_profile.install(_is_ours, stand_down, _stopped, _exported)
    return True


def _is_ours(p: Any) -> bool:
    """p (a torch.autograd.profiler.profile) is the recording of nsyscomm's own profiler."""
    own = _prof
    return own is not None and getattr(own, "profiler", None) is p


def stand_down() -> None:
    """The program's profiler is about to record: stop nsyscomm's and drop what it recorded, so
    the rank's trace is one consistent window, the program's; never start nsyscomm's again."""
    global _prof, _stood_down
    with _lock:
        _stood_down = True
        _save_pending()  # the program's last recording: no export of it follows a new one
        p = _prof
        if p is None:
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p.stop()
        except Exception as e:
            sys.stderr.write(f"nsyscomm: could not stop nsyscomm's torch.profiler ({e!r})\n")
        _prof = None
        _register_exit()


def _stopped(p: Any) -> None:
    """A recording of the program's profiler finished: a window, once exported (or at exit)."""
    with _lock:
        _pending.append(p)
        _register_exit()


def _exported(p: Any, path: str) -> None:
    """The program wrote recording p to path: copy it as this rank's next window."""
    with _lock:
        if not any(q is p for q in _pending):
            return  # exported again, or nsyscomm saved it already
        _pending[:] = [q for q in _pending if q is not p]
        _add_window(lambda dest: program_profile.copy_window(path, dest))


def _add_window(write: Any) -> None:
    rank = _rank if _rank is not None else _rank_now()
    if _dir is None or rank is None:
        return
    dest = os.path.join(_dir, f".rank{rank}.window{len(_windows)}.json")
    if write(dest):
        _windows.append(dest)
        if _done:  # a window after the process group was destroyed: the trace again, with it
            _write_windows(rank)


def _at_exit() -> None:
    """The windows the program never exported are saved now (no export of its can follow), then
    the trace is written and the window files go."""
    with _lock:
        _save_pending()
        finish()
        for w in _windows:
            try:
                os.unlink(w)
            except OSError:
                pass
        _windows.clear()


def _save_pending() -> None:
    """Save the program's delivered recordings it did not export as windows, and let go of them
    all (each holds its whole recording in memory)."""
    for p in _pending:
        if not program_profile.dropped(p):
            _add_window(lambda dest, p=p: program_profile.save_window(p, dest))
    _pending.clear()


def _rank_now() -> int | None:
    """This process's rank when nsyscomm's profiler never started (the program's ran first)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    return None


def _register_exit() -> None:
    global _atexit
    if not _atexit:
        atexit.register(_at_exit)
        _atexit = True


def trace_path(rank: int) -> str:
    return os.path.join(_dir or ".", f"rank{rank}.json.gz")


def start(rank: int) -> None:
    """Start profiling this process (idempotent; never again after finish())."""
    global _prof, _rank, _stood_down
    with _lock:
        if _prof is not None or _done or _dir is None:
            return
        _rank = rank
        _register_exit()
        _install_sigterm()
        if _stood_down:
            return
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile

            if torch.autograd.profiler._is_profiler_enabled:  # the program's records already
                _stood_down = True
                return
            acts = _activities(torch, ProfilerActivity)
            # what the Kineto reader uses and nothing more: no shapes, stacks, memory or FLOPs
            _prof = profile(activities=acts, record_shapes=False, with_stack=False, profile_memory=False)
            with warnings.catch_warnings(), _user_scope_only():
                # torch's own notes ("Profiler clears events at the end of each cycle ...") are about
                # schedules nsyscomm does not use; they would land in the job's output
                warnings.simplefilter("ignore")
                _prof.start()
        except Exception as e:
            _prof = None
            sys.stderr.write(f"nsyscomm: torch.profiler did not start ({e!r}); no trace for rank {rank}\n")


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
        p, rank = _prof, _rank if _rank is not None else _rank_now()
        if _windows and rank is not None:
            _done = True
            return _write_windows(rank)
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


def _write_windows(rank: int) -> str | None:
    """The program's windows joined into DIR/rank<R>.json.gz (through a temporary name)."""
    path = trace_path(rank)
    part = path[: -len(".json.gz")] + ".partial.gz"
    try:
        n = program_profile.join_windows(_windows, part)
        if not n:
            return None
        os.replace(part, path)
    except Exception as e:
        sys.stderr.write(f"nsyscomm: could not write the torch.profiler trace {path} ({e!r})\n")
        return None
    program_profile.note(_dir or ".", rank, n)
    return path


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
            _at_exit()
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
