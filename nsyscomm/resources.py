"""The limits a command runs under (``ulimit -v``, ``ulimit -n``): the native libraries set up
for them before they load, a limit too low refused at start-up, and a failure they caused
named with the limit and its fix (exit status 2), never a hang, an abort or a traceback.

Under a limit on address space (RLIMIT_AS) the libraries' own reservations are what run out
first, not the data: OpenBLAS maps a buffer per thread when numpy loads and, when that fails,
retries and then hangs on a lock; glibc reserves a 64 MiB arena per thread that allocates; Arrow's
jemalloc reserves large regions up front. So, when such a limit is set, each process (and the
extraction's workers, which inherit the environment) runs BLAS and OpenMP on one thread, Arrow
on the system allocator and glibc with two arenas; DuckDB, whose allocations then fail before
its memory limit is reached, says it is out of memory (exit 2). Below MIN_ADDRESS_SPACE even the
bundled samples cannot be read: the command stops at once and says so, as it does below
MIN_OPEN_FILES open files.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource

# the address space below which `nsyscomm summarize` cannot read a bundled sample, with the
# set-up below and a margin (read at 1.8 GB, not at 1.6 GB on a 2-core machine: docs/limits.md);
# the libraries' code, threads and reservations take most of it
MIN_ADDRESS_SPACE = 2048 * 2**20
# the fewest open files a command is started with: Python's own, DuckDB's, a report's and the
# extraction pool's pipes to its workers (a folder of reports failed at 16, in the pool's fork
# server, which cannot say why; read at 32)
MIN_OPEN_FILES = 64
_SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def _soft(which: int) -> int | None:
    try:
        soft = resource.getrlimit(which)[0]
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def address_space() -> int | None:
    """The limit on this process's address space in bytes (``ulimit -v``), None when unlimited."""
    return _soft(resource.RLIMIT_AS)


def open_files() -> int | None:
    """The limit on this process's open files (``ulimit -n``), None when unlimited."""
    return _soft(resource.RLIMIT_NOFILE)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def check() -> str | None:
    """Why the command cannot run under this process's limits (one line, with the fix), or None."""
    room = address_space()
    if room is not None and room < MIN_ADDRESS_SPACE:
        return (
            f"out of memory: the address space this process may use (ulimit -v) is {_mib(room)}, and "
            f"nsyscomm's libraries alone need about {_mib(MIN_ADDRESS_SPACE)}: raise it "
            f"(ulimit -v unlimited, or at least ulimit -v {MIN_ADDRESS_SPACE // 1024})"
        )
    files = open_files()
    if files is not None and files < MIN_OPEN_FILES:
        return (
            f"too many open files: the limit on this process's open files (ulimit -n) is {files}, and "
            f"nsyscomm needs at least {MIN_OPEN_FILES}: raise it, e.g. ulimit -n 4096"
        )
    return None


def prepare() -> None:
    """Before numpy, pyarrow and DuckDB load: under a limit on address space, the set-up above
    (variables the user set are kept)."""
    if address_space() is None:
        return
    for name in _SINGLE_THREADED:
        os.environ.setdefault(name, "1")
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")  # for the processes this one starts
    with contextlib.suppress(OSError, AttributeError):  # this one's allocator is running already
        import ctypes

        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)


def memory_fix() -> str:
    """What to change when memory ran out: the address-space limit first, when one is set (the
    allocations fail there long before the machine's memory runs out)."""
    room = address_space()
    fix = "give a larger --memory-limit (NSYSCOMM_MEMORY_LIMIT), or fewer --jobs"
    return fix if room is None else f"raise ulimit -v (now {room // 1024} KiB), or {fix}"


def out_of_memory(e: BaseException) -> bool:
    """Whether e is memory running out, however the library that failed says it: Python's
    MemoryError, DuckDB's OutOfMemoryException, or a shared library that could not be mapped."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryException":
        return True
    text = str(e)
    return any(s in text for s in ("failed to map segment", "Cannot allocate memory", "std::bad_alloc"))


def out_of_files(e: BaseException) -> str | None:
    """When e is the limit on open files reached: one line naming it and the fix, else None."""
    full = (isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE)) or "Too many open files" in str(e)
    if not full:
        return None
    limit = open_files()
    now = f" is {limit}" if limit is not None else ""
    return (
        f"too many open files: the limit on this process's open files (ulimit -n){now}; "
        f"raise it, e.g. ulimit -n 4096, or give fewer reports at once (--jobs 1)"
    )
