"""The map stage at scale: extract many reports in parallel (a process pool, or an existing Dask
cluster), through the Parquet cache (nsyscomm.extract.cache), with a progress bar.

The combining stage (nsyscomm.combine) reads only what these return: one Extract per report.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Any

from nsyscomm import duck
from nsyscomm.errors import InputError
from nsyscomm.extract.cache import cached_extract

# show a progress bar without a terminal from this many reports on (a job's log then shows it)
MANY_REPORTS = 64
# processes and threads of a parallel extraction besides this process's: the fork server with its
# imports' threads and multiprocessing's resource tracker; and each worker with DuckDB on one
# thread, its allocator's thread and its extraction's helper threads (counted with ps -L)
SERVER_TASKS = 4
WORKER_TASKS = 4
# how long --dask waits for its scheduler to answer (seconds)
DASK_CONNECT_S = 30
# the reports of one Dask task: each task is a round of messages between this client, the
# scheduler and a worker, which a small report's extraction does not outweigh by much; a few tasks
# for each thread still share the reports out evenly
DASK_TASKS_PER_THREAD = 4
DASK_MOST_PER_TASK = 16


def _one(path: str | Path, name: str, cache: bool, threads: int | None = None):
    return cached_extract(Path(path), name, cache, threads)


def _want_progress(progress, n: int) -> bool:
    if progress is not None:
        return bool(progress)
    if n < 2:
        return False
    return sys.stderr.isatty() or n >= MANY_REPORTS


class _Bar:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool, total: int, what: str):
        self.p = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.p = Progress(
                TextColumn("[bold]nsyscomm[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.p.start()
            self.task = self.p.add_task(what, total=total)

    def advance(self, k: int = 1) -> None:
        if self.p is not None:
            self.p.advance(self.task, k)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs(n: int) -> int:
    return max(1, min(usable_cores(), n))


def extract_many(
    files: Sequence[str | Path],
    names: Sequence[str],
    *,
    jobs: int | None = None,
    cache: bool = True,
    dask: str | None = None,
    progress: bool | None = None,
    consume: Callable[[int, Any], Any] | None = None,
) -> list:
    """Extract every report (same order as ``files``). ``jobs``: worker processes (default: the
    usable cores, at most one per report; 1 runs in this process, as does a daemonic process, a
    multiprocessing.Pool's worker, which may start none). ``dask``: the address of a
    running Dask scheduler (``tcp://host:8786``) to run the extraction on instead, or ``local``
    for a cluster started in this process (``jobs`` threads) for the extraction. ``progress``:
    None shows a bar on stderr when it is a terminal or there are many reports. ``consume(i,
    extract)``: called with each extract as it arrives (in any order); what it returns is kept
    instead (the combining stage takes the calls from there, so they are not all held at once)."""
    files = [str(f) for f in files]
    names = list(names)
    n = len(files)
    if n == 0:
        return []
    keep = consume or _as_is
    bar = _Bar(_want_progress(progress, n), n, f"extracting {n} report(s)")
    try:
        jobs = default_jobs(n) if not jobs else max(1, int(jobs))
        if dask:
            return _on_dask(files, names, cache, dask, jobs, bar, keep)
        if _daemonic():  # multiprocessing refuses it children: the reports are extracted here
            jobs = 1
        jobs = _within_task_limit(jobs if n > 1 else 1)
        if jobs == 1:
            out = []
            for i, (f, name) in enumerate(zip(files, names)):
                out.append(keep(i, _one(f, name, cache)))
                bar.advance()
            return out
        return _on_pool(files, names, cache, jobs, bar, keep)
    except (OSError, RuntimeError, EOFError) as e:
        # a thread or process that could not start (EOFError: the fork server, which ended when
        # its fork failed): the limit that stopped it, named, instead of what it broke
        if duck.task_room() is not None and (isinstance(e, EOFError) or duck.out_of_tasks(e)):
            raise InputError(duck.task_limit_message()) from None
        raise
    finally:
        bar.close()


def _within_task_limit(jobs: int) -> int:
    """``jobs`` or fewer, for the processes and threads this user may still start
    (RLIMIT_NPROC): workers as many as fit, else 1 (the extraction in this process); an
    InputError naming the limit when not even that fits."""
    room = duck.task_room()
    if room is None:
        return jobs
    duck.check_task_room()
    limit, used = room
    fit = (limit - used - duck.TASK_HEADROOM - SERVER_TASKS) // WORKER_TASKS
    return min(jobs, fit) if fit >= 2 else 1


def _daemonic() -> bool:
    """Whether this process is a daemonic one of multiprocessing's (a multiprocessing.Pool's
    worker, a Process(daemon=True)): it may start no process of its own. Such a process runs
    multiprocessing's code from its start: where multiprocessing was never imported, the process
    is no such one, and a run of one report, which starts no pool, does not import it."""
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is not None and bool(multiprocessing.current_process().daemon)


def _as_is(i: int, extract):
    return extract


def _on_pool(files, names, cache, jobs, bar, keep) -> list:
    # imported here: a serial or Dask run starts no worker (nsyscomm.extract.workers: how they
    # start, and why not by forking this process)
    from nsyscomm.extract import workers

    # the workers share the cores: each DuckDB gets its share of them, not all of them (threads
    # beyond the cores made many small reports slower)
    threads = max(1, usable_cores() // jobs) if duck.task_room() is None else 1
    stall = workers.stall_timeout()
    out: list = [None] * len(files)
    with workers.sigterm_ends_workers():
        return _collect(files, names, cache, jobs, threads, stall, bar, keep, out)


def _collect(files, names, cache, jobs, threads, stall, bar, keep, out) -> list:
    from concurrent.futures.process import BrokenProcessPool

    from nsyscomm.extract import workers

    pool = workers.start(jobs)
    try:
        pending = {pool.submit(_one, f, name, cache, threads): i for i, (f, name) in enumerate(zip(files, names))}
        while pending:
            done, _ = wait(pending, timeout=stall, return_when=FIRST_COMPLETED)
            if not done:
                raise workers.WorkerError(
                    _in_progress(
                        files,
                        pending,
                        jobs,
                        f"no report finished in {stall:g} s: a worker is stuck on it",
                        f"give more time with {workers.STALL_ENV}=SECONDS, or run with --jobs 1",
                    )
                )
            for fut in sorted(done, key=pending.__getitem__):
                try:
                    extract = fut.result()  # a report's InputError surfaces here, as in the serial run
                except BrokenProcessPool:
                    raise workers.WorkerError(
                        _in_progress(
                            files,
                            pending,
                            jobs,
                            "a worker process ended while extracting it (killed, out of memory, or crashed)",
                            "run again with --jobs 1, or with a --memory-limit",
                        )
                    ) from None
                i = pending.pop(fut)
                out[i] = keep(i, extract)
                bar.advance()
    except BaseException:
        workers.stop(pool)  # Ctrl-C, a report's error, a dead or stuck worker: no worker left behind
        raise
    pool.shutdown(wait=True)
    return out


def _in_progress(files, pending, jobs: int, what: str, fix: str) -> str:
    """'REPORT: WHAT (or OTHER, OTHER beside it); FIX', naming the reports not finished that the
    workers took: the first ``jobs`` of them (the pool hands them out in order)."""
    first = sorted(pending.values())[:jobs]
    others = ", ".join(str(files[i]) for i in first[1:])
    beside = f" (or {others}, beside it)" if others else ""
    return f"{files[first[0]]}: {what}{beside}; {fix}"


def _on_dask(files, names, cache, address, jobs, bar, keep) -> list:
    """On the Dask cluster at ``address``, or on one started in this process for ``local`` (one
    worker of ``jobs`` threads, closed at the end). The workers get absolute paths: their current
    folder is not this process's. Extracts are taken as they finish, whichever first, and let go
    of on the cluster at once, as the local pool's are."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise InputError("--dask needs the distributed package: pip install 'nsyscomm[dask]'") from None
    files = [os.path.abspath(f) for f in files]
    with contextlib.ExitStack() as stack:
        if address == "local":
            from distributed import LocalCluster

            target: Any = stack.enter_context(
                LocalCluster(n_workers=1, threads_per_worker=jobs, processes=False, dashboard_address=None)
            )
        else:
            target = address
        try:
            client = stack.enter_context(Client(target, set_as_default=False, timeout=DASK_CONNECT_S))
        except (OSError, ValueError, TypeError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise InputError(
                f"--dask {address}: no Dask scheduler reached there ({first}); give a running scheduler's "
                f"address, e.g. tcp://host:8786, or local for a cluster in this process"
            ) from None
        host_threads = _host_threads(client)
        parts = _parts(len(files), sum(host_threads.values()))
        futures = [client.submit(_some_on_dask, files[p], names[p], cache, host_threads, pure=False) for p in parts]
        index = {f.key: p for f, p in zip(futures, parts)}
        out: list = [None] * len(files)
        try:
            for fut, extracts in as_completed(futures, loop=client.loop, with_results=True):
                for i, extract in zip(range(index[fut.key].start, index[fut.key].stop), extracts):
                    out[i] = keep(i, extract)
                fut.release()  # the cluster and this client let go of the extracts' calls
                bar.advance(len(extracts))
        except BaseException:
            client.cancel(futures)  # a report's error or Ctrl-C: the cluster stops the rest
            raise
        return out


def _host_threads(client) -> dict[str, int]:
    """The Dask threads on each host of the cluster, all of its workers' together."""
    threads: dict[str, int] = {}
    for w in client.scheduler_info(n_workers=-1)["workers"].values():
        threads[w["host"]] = threads.get(w["host"], 0) + int(w.get("nthreads") or 1)
    return threads


def _parts(n: int, threads: int) -> list[slice]:
    """The reports of each Dask task: consecutive runs, at least DASK_TASKS_PER_THREAD tasks for
    each of the cluster's threads (so that they all stay busy to the end), at most
    DASK_MOST_PER_TASK reports in one (a task's extracts are held until it ends)."""
    size = max(1, min(DASK_MOST_PER_TASK, n // max(1, threads * DASK_TASKS_PER_THREAD)))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def _some_on_dask(paths: list[str], names: list[str], cache: bool, host_threads: dict[str, int]) -> list:
    """Some reports on a Dask worker, one after the other, each one's DuckDB on its share of the
    machine's cores (the cores over the Dask threads on that host), as each local pool worker
    gets its share: a DuckDB on every core in each thread of each worker made many small reports
    slower."""
    from distributed import get_worker

    worker = get_worker()
    threads = max(1, usable_cores() // max(1, host_threads.get(worker.ip, worker.state.nthreads)))
    return [_one(path, name, cache, threads) for path, name in zip(paths, names)]
