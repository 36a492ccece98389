"""The program's own torch.profiler under ``nsyscomm run --profiler torch``: nsyscomm stands down.

torch (2.13 included) runs one Kineto profiling session per process: a second profiler that
prepares or starts while another records takes the session over, and the first one's stop then
finds none; exporting its empty result crashes the process (SIGSEGV). So the two cannot record
at once, and the program's profiler is the one that must keep working: it chose its window
(a schedule's wait/warmup/active steps, ``ProfilerStep#N`` ranges) and its own outputs.

Every Kineto profiler of torch, ``torch.profiler.profile`` and ``torch.autograd.profiler.profile``
alike, prepares and starts through ``torch.autograd.profiler.profile`` and stops through its
``__exit__``. Three methods of that class are wrapped:

- before the program's profiler prepares or starts, nsyscomm's own profiler stops, and its
  recording is dropped (``torch_profile.stand_down``): from then on this process is profiled by
  the program alone, so the rank's trace covers one consistent window, the program's;
- each of the program's recordings that stops is one window of the rank's trace. Kineto saves a
  recording once only ("Trace is already saved"), so the program's own export comes first: when
  the program exports a window (``export_chrome_trace``, which ``tensorboard_trace_handler`` uses
  too), nsyscomm copies the file it wrote; a window the program never exports is saved by
  nsyscomm at exit;
- the windows are joined into ``rank<R>.json.gz`` (``torch_profile.finish``).

The wrapper's ranges are recorded by whichever profiler runs, so the program's windows carry the
wrapper's metadata too. Each process that stood down appends one line to ``NOTE_NAME`` in the
trace folder; the launcher reports them in one line.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import weakref
from collections.abc import Callable
from typing import Any

from nsyscomm.capture.run_folder import PROGRAM_PROFILER_NOTE as NOTE_NAME

_installed = False
_by_schedule: weakref.WeakSet[Any] = weakref.WeakSet()  # recordings a torch.profiler.profile stopped
_delivered: weakref.WeakSet[Any] = weakref.WeakSet()  # ... and handed to its trace-ready point


def install(
    is_ours: Callable[[Any], bool],
    stand_down: Callable[[], None],
    stopped: Callable[[Any], None],
    exported: Callable[[Any, str], None],
) -> None:
    """Wrap torch.autograd.profiler.profile's prepare, start, exit and export (once per process).

    is_ours(p): p is nsyscomm's own recording; stand_down(): stop nsyscomm's own before the
    program's records; stopped(p): the program's recording p has finished; exported(p, path):
    the program wrote p's trace to path."""
    global _installed
    if _installed:
        return
    try:
        from torch.autograd import profiler as autograd_profiler

        cls = autograd_profiler.profile
        prepare, start, exit_, export = cls._prepare_trace, cls._start_trace, cls.__exit__, cls.export_chrome_trace
    except (ImportError, AttributeError) as e:
        sys.stderr.write(f"nsyscomm: cannot watch the program's own torch.profiler ({e!r})\n")
        return

    def _prepare_trace(self):
        if not is_ours(self):
            stand_down()
        return prepare(self)

    def _start_trace(self):
        if not is_ours(self):
            stand_down()
        return start(self)

    def __exit__(self, *exc):
        out = exit_(self, *exc)
        if not is_ours(self) and getattr(self, "kineto_results", None) is not None:
            stopped(self)
        return out

    def export_chrome_trace(self, path, *args, **kwargs):
        out = export(self, path, *args, **kwargs)
        if not is_ours(self):
            exported(self, os.fspath(path))
        return out

    wrapped = {"_prepare_trace": _prepare_trace, "_start_trace": _start_trace, "__exit__": __exit__}
    for name, fn in dict(wrapped, export_chrome_trace=export_chrome_trace).items():
        setattr(cls, name, fn)
    _watch_schedule()
    _installed = True


def _watch_schedule() -> None:
    """Note which recordings a torch.profiler.profile stopped and which it delivered (its
    ``_trace_ready``, called whether or not the program set ``on_trace_ready``)."""
    try:
        from torch.profiler import profiler as torch_profiler

        kineto, sched = torch_profiler._KinetoProfile, torch_profiler.profile
        stop, ready = kineto.stop_trace, sched._trace_ready
    except (ImportError, AttributeError):
        return  # every recording the program stops is then a window

    def stop_trace(self):
        if self.profiler is not None:
            _by_schedule.add(self.profiler)
        return stop(self)

    def _trace_ready(self):
        if self.profiler is not None:
            _delivered.add(self.profiler)
        return ready(self)

    setattr(kineto, "stop_trace", stop_trace)  # noqa: B010 - a method replaced on the class
    setattr(sched, "_trace_ready", _trace_ready)  # noqa: B010


def dropped(p: Any) -> bool:
    """The program's profiler stopped recording p without delivering it: no window."""
    return p in _by_schedule and p not in _delivered


def save_window(p: Any, path: str) -> bool:
    """Write the finished recording p (an autograd profile) to path as chrome JSON; False when torch cannot."""
    try:
        p.kineto_results.save(path)
        return True
    except Exception as e:
        sys.stderr.write(f"nsyscomm: could not keep a window of the program's torch.profiler ({e!r})\n")
        _unlink(path)
        return False


def copy_window(src: str, path: str) -> bool:
    """Copy the trace the program exported (plain or gzip chrome JSON) to path as plain JSON."""
    try:
        with open(src, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with gzip.open(src, "rb") if gz else open(src, "rb") as f, open(path, "wb") as out:
            shutil.copyfileobj(f, out)
        return True
    except OSError as e:
        sys.stderr.write(f"nsyscomm: could not copy the program's torch.profiler trace {src} ({e!r})\n")
        _unlink(path)
        return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def join_windows(windows: list[str], out: str) -> int:
    """The windows' events in one gzip chrome trace at out (the first window's metadata: one process,
    one clock); returns how many windows were read."""
    doc: dict[str, Any] | None = None
    n = 0
    for w in windows:
        try:
            with open(w, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"nsyscomm: skipping an unreadable window of the program's torch.profiler {w} ({e!r})\n")
            continue
        n += 1
        if doc is None:
            doc = d
        else:
            doc.setdefault("traceEvents", []).extend(d.get("traceEvents") or [])
    if doc is not None:
        with gzip.open(out, "wt", encoding="utf-8") as f:
            json.dump(doc, f)
    return n


def note(folder: str, rank: int, windows: int) -> None:
    """One line per process that stood down, for the launcher's report (appends are whole lines)."""
    line = f"rank {rank}: {windows} window(s)\n"
    try:
        fd = os.open(os.path.join(folder, NOTE_NAME), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def read_notes(folder: str) -> list[tuple[int, int]]:
    """(rank, windows) per process that stood down, as note() wrote them."""
    try:
        with open(os.path.join(folder, NOTE_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    last: dict[int, int] = {}  # a process that wrote its trace again noted it again: the last count
    for ln in lines:
        head, _, tail = ln.partition(":")
        try:
            last[int(head.split()[-1])] = int(tail.split()[0])
        except (ValueError, IndexError):
            continue
    return sorted(last.items())
