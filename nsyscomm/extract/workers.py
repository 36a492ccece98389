"""The extraction pool's worker processes: started so that none can inherit a lock held in the
caller's process, and stopped at once when the extraction ends in an error or Ctrl-C.

A worker forked from the caller's process inherits every lock as it was at the fork, but only the
thread that forked: a lock another thread held then (DuckDB's, in a query of the caller's or in
nsyscomm's own ``duck.close_soon``; an allocator's; the import lock) stays held in the worker
forever, and the worker hangs at its first use of it. So the workers come from
multiprocessing's fork server instead: a fresh interpreter, started once per process by
fork+exec (nothing of the caller's crosses the exec), that imports this module and, through it,
the readers (DuckDB, pandas, pyarrow) once, and then forks each worker from its single Python
thread. No DuckDB database exists there; the threads the imports start (OpenBLAS's pool,
jemalloc's background thread) are stopped or locked by their libraries' own fork handlers. Where
there is no fork server (Windows), workers are spawned: fresh interpreters too.

A worker needs nothing of the caller's ``__main__``, but multiprocessing runs it again in every
worker it starts by fork server or spawn (as ``__mp_main__``): a script that summarizes its last
run at its end, without an ``if __name__ == "__main__":`` guard, would train again in each worker.
Workers are named WORKER_NAME-..., and the fork server leaves ``__main__`` alone for those
(``_prepare``); other processes of the caller's are started as multiprocessing always does.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import itertools
import multiprocessing
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import context, process, spawn
from types import FrameType
from typing import Any

from nsyscomm import settings, temp_folders
from nsyscomm.errors import InputError, Terminated

WORKER_NAME = "nsyscomm-extract"
# a worker that finishes no report in this long is stuck: the run stops with an error naming the
# reports in progress (seconds; very large reports may need more)
STALL_ENV = "NSYSCOMM_STALL_TIMEOUT"
DEFAULT_STALL_S = 600.0
# imported once in the fork server (in this order: this module first, it patches spawn.prepare
# there), so that the workers of every load have them: what extracting a report imports, read or
# from the cache. Not the caller's __main__, which the server would otherwise import itself.
PRELOAD = (
    __name__,
    "nsyscomm.extract.pool",
    "nsyscomm.extract.readers",
    # the readers of the formats (nsyscomm.ingest.formats imports each when a file of its is met)
    "nsyscomm.ingest.nsys.extract",
    "nsyscomm.ingest.kineto.trace",
    "nsyscomm.ingest.straggler.trace",
    "nsyscomm.ingest.nsys.arrow",
    "nsyscomm.ingest.nsys._sqlite_scan",
    "nsyscomm.bundled",
    "duckdb_extension_sqlite_scanner",
    "pyarrow.dataset",
    "pyarrow.parquet",
    "pandas.io.parquet",
    "pandas.core.arrays.arrow.extension_types",
)


class WorkerError(InputError):
    """A worker died or made no progress: one line naming the report(s), exit status 2."""


def stall_timeout() -> float:
    text = settings.stall_timeout()
    if not text:
        return DEFAULT_STALL_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise InputError(f"{STALL_ENV}={text!r} is not a number of seconds; give one like {STALL_ENV}=1200")
    return value


def _stdlib_prepare() -> Any:
    return getattr(spawn, "_nsyscomm_stdlib_prepare", spawn.prepare)


def _prepare(data: Mapping[str, Any]) -> None:
    """multiprocessing.spawn.prepare, without re-running ``__main__`` in nsyscomm's workers."""
    if str(data.get("name", "")).startswith(WORKER_NAME):
        data = {k: v for k, v in data.items() if k not in ("init_main_from_name", "init_main_from_path")}
    spawn._nsyscomm_stdlib_prepare(data)  # type: ignore[attr-defined]


# In the fork server (which imports this module first) this applies to the workers it forks
# afterwards; in any other process nothing calls spawn.prepare after its own start.
spawn._nsyscomm_stdlib_prepare = _stdlib_prepare()  # type: ignore[attr-defined]
spawn.prepare = _prepare


_numbers = itertools.count(1)


class _Named(process.BaseProcess):
    """A worker's name: _prepare knows nsyscomm's workers by it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("name", f"{WORKER_NAME}-{next(_numbers)}")
        super().__init__(*args, **kwargs)


_CONTEXT: context.BaseContext
if sys.platform != "win32" and "forkserver" in multiprocessing.get_all_start_methods():

    class _ForkServerWorker(_Named, context.ForkServerProcess):
        pass

    class _ForkServer(context.ForkServerContext):
        Process = _ForkServerWorker

    _CONTEXT = _ForkServer()
else:

    class _SpawnWorker(_Named, context.SpawnProcess):
        pass

    class _Spawn(context.SpawnContext):
        Process = _SpawnWorker

    _CONTEXT = _Spawn()


def warm() -> None:
    """Start the fork server now, without waiting for it: it imports the readers while the caller
    goes on (a command: its own imports), instead of when the first worker is asked for."""
    if _CONTEXT.get_start_method() == "forkserver":
        _CONTEXT.set_forkserver_preload(list(PRELOAD))
        from multiprocessing import forkserver

        forkserver.ensure_running()


def start(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` workers, each seeing the caller's environment as it is now (the memory
    limit and cache folder of this run: the fork server's own is the one it was started with)."""
    warm()
    return ProcessPoolExecutor(max_workers=jobs, mp_context=_CONTEXT, initializer=_init, initargs=(dict(os.environ),))


def _init(environ: dict) -> None:
    # Ctrl-C is the caller's to handle: it ends the workers (stop); a worker of its own would
    # print a traceback of its loop and leave the pool broken
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _let_go_of_server()
    # the modules the server imported stay to the end: frozen, the collector no longer walks their
    # objects at every full collection of every report (as commands.collector_paused does in the
    # caller; docs/performance.md, "The extraction pool's workers")
    gc.freeze()
    _end_with_parent()
    os.environ.clear()
    os.environ.update(environ)


def _let_go_of_server() -> None:
    """Close the worker's copy of the fork server's "alive" pipe. The server ends when every
    process holding the pipe's write end has ended; multiprocessing hands a copy to every process
    it forks, so that it could start processes of its own. A worker never does, and with its copy
    open a caller killed outright (SIGKILL, or SIGTERM to a library caller) left the server
    waiting for the workers, and the workers (killed when the server ends) waiting for the server:
    both alive for good."""
    if _CONTEXT.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    fd = server._forkserver_alive_fd
    server._forkserver_alive_fd = None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def _end_with_parent() -> None:
    """Linux: the worker is killed when the process that forked it ends. That is the fork server,
    which ends with the caller: a caller killed outright (SIGKILL, a CI timeout) leaves no worker
    waiting for work forever."""
    if not sys.platform.startswith("linux"):
        return
    server = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != server:  # the server ended before the call above
        os._exit(1)


def _in_fork_server() -> bool:
    """Whether this module is being imported by multiprocessing's fork server (its preload)."""
    from multiprocessing import forkserver

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def _remove_callers_folder() -> None:
    """At the fork server's exit (its caller has ended: the server ends when the caller's end of
    the "alive" pipe closes): remove the caller's multiprocessing folder (pymp-*, which holds the
    server's socket). The caller removes it at its own exit; a caller killed outright cannot."""
    from multiprocessing import forkserver

    address = forkserver._forkserver._forkserver_address  # type: ignore[attr-defined]
    if not isinstance(address, str) or not address or address.startswith("\0"):
        return
    folder = os.path.dirname(address)
    if os.path.basename(folder).startswith("pymp-"):
        shutil.rmtree(folder, ignore_errors=True)


if _CONTEXT.get_start_method() == "forkserver" and _in_fork_server():
    atexit.register(_remove_callers_folder)


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_ends_workers() -> Iterator[None]:
    """SIGTERM raises Terminated in the block (the main thread's; elsewhere signal handlers cannot
    be set), so that it ends the workers as Ctrl-C does, at once, and the command says so in one
    line. A handler of the caller's own, or SIGTERM ignored, is left as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        # a job's database made meanwhile keeps SIGTERM raising Terminated (nsyscomm.temp_folders)
        after = temp_folders.raise_terminated_handler() if temp_folders.holds_sigterm() else signal.SIG_DFL
        signal.signal(signal.SIGTERM, after)


def stop(pool: ProcessPoolExecutor) -> None:
    """End the pool now: queued reports cancelled, running workers killed (a stuck one never ends
    on its own, and Ctrl-C must not wait for a large report), their processes reaped."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError):  # already ended and closed
            pass
    pool.shutdown(wait=True)
    for p in procs:
        p.join(timeout=5)
