"""DuckDB connections that never download anything, and the SQL files shipped in the wheel."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from nsyscomm import settings, temp_folders

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

T = TypeVar("T")


@functools.cache
def _sqlite_extension() -> str:
    import duckdb_extension_sqlite_scanner as ext

    found = sorted(Path(ext.__file__).parent.glob("extensions/*/sqlite_scanner.duckdb_extension"))
    if not found:
        raise RuntimeError(
            "duckdb-extension-sqlite-scanner is installed without its extension file; "
            "reinstall it: pip install --force-reinstall duckdb-extension-sqlite-scanner==1.5.5"
        )
    return str(found[-1])


# Memory per process: DuckDB's buffers stay under this limit (a size: "4GB", "500MB", or a
# share of RAM: "50%"), spilling to disk past it; by default DuckDB's own, 80% of RAM. Every
# DuckDB database of the process (one per report being extracted, one for the job) gets it.
MEMORY_LIMIT_ENV = "NSYSCOMM_MEMORY_LIMIT"
# Where they spill (default: the system's temporary folder), never the current folder (DuckDB's
# default for in-memory databases, ./.tmp): a folder of its own per database, which DuckDB
# creates on the first spill and removes when the database closes (nsyscomm.temp_folders).
TEMP_DIR_ENV = "NSYSCOMM_TEMP_DIR"

# Inputs this small, all of them together (bytes on disk), are analysed by DuckDB on one thread
# (small_input): their tables hold thousands of rows, and a query over them, planned and run in
# milliseconds, spent more time handing its few tasks between threads than working; on a busy
# machine it also waited for a thread of its own to be scheduled (docs/performance.md, "A small
# report").
SMALL_INPUT_BYTES = 16 * 2**20
_small_input: contextvars.ContextVar[bool] = contextvars.ContextVar("nsyscomm_small_input", default=False)


def connect(sqlite: bool = False, threads: int | None = None, folder: str | None = None) -> duckdb.DuckDBPyConnection:
    """A database in memory, or with folder (nsyscomm.temp_folders.job_folder) a file there: DuckDB
    compresses a file's tables as it writes them, and can evict their pages past its memory limit;
    an in-memory table is neither."""
    # Auto-install/auto-load off: a profiler on a cluster node must never reach the network.
    config: dict[str, str | bool | int | float | list[str]] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if threads is None and _small_input.get():
        threads = 1
    threads = within_task_limit(threads)
    if threads:
        config["threads"] = threads
    # DuckDB flushes its allocator (memory back to the OS) after every task that peaked over its
    # threshold, and a large report then pays in page faults to get the memory back, task after
    # task. A short-lived process keeps the memory instead: the peak is the same, and the memory
    # limit still holds.
    config["allocator_flush_threshold"] = "8GB"
    config["allocator_bulk_deallocation_flush_threshold"] = "8GB"
    if sqlite:
        # DuckDB checks a signed extension by hashing the whole file at every LOAD, most of what
        # a small report costs (benchmarks/bench_many_reports.py shows it). The file is the one pip
        # installed and checked with our own code (duckdb-extension-sqlite-scanner); nothing else
        # is loaded: LOAD below names that file, auto-loading is off and no user SQL runs here.
        config["allow_unsigned_extensions"] = True
    temp_folders.sweep()
    config["temp_directory"] = temp_folders.spill_folder()
    limit = _limit()
    if limit:
        config["memory_limit"] = _share_of_ram(limit) if limit.endswith("%") else limit
    try:
        con = duckdb.connect(os.path.join(folder, "job.duckdb") if folder else ":memory:", config=config)
    except duckdb.Error as e:
        if not limit:
            raise
        from nsyscomm.errors import InputError

        raise InputError(
            f"{MEMORY_LIMIT_ENV}={limit!r} is not a memory size ({str(e).splitlines()[0]}); "
            f"give one like 4GB, 500MB or 50%"
        ) from None
    # IEJoin for "launch inside range" joins: far faster than hash join + filter
    # (docs/architecture.md, "DuckDB")
    con.execute("SET prefer_range_joins = true")
    # An ASOF join whose left side DuckDB estimates at 64 rows or fewer runs as a nested loop over
    # every pair, and its estimates of joined and registered tables run low: the late-arrival
    # query and busy.py's edges both met it, ten times slower and more (docs/performance.md, "A
    # late rank's host events"). Where the loop would have been quicker, the sort-merge costs little.
    con.execute("SET asof_loop_join_threshold = 0")
    quiet(con)
    if sqlite:
        con.execute(f"LOAD '{_sqlite_extension()}'")
    return con


# Threads a process of nsyscomm's may start beside its DuckDB's at once (closing a database,
# a second cursor's query, pyarrow's and the readers' pools): kept free under a limit on tasks.
TASK_HEADROOM = 4
# A limit this high is not counted against: Linux's default is about half its threads-max
# (hundreds of thousands), and counting a user's tasks reads every process's status in /proc.
TASK_LIMIT_UNCOUNTED = 1 << 16
# a count serves this long: one per database would read /proc once per report
TASK_COUNT_TTL_S = 1.0
_counted: list = []


def task_room() -> tuple[int, int] | None:
    """(the limit on processes and threads, RLIMIT_NPROC; how many its user runs now) where it
    applies to this process: a finite limit, a user other than root without the capabilities that
    lift it. None elsewhere (the usual case: no limit, nothing counted)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft == resource.RLIM_INFINITY or soft >= TASK_LIMIT_UNCOUNTED or os.getuid() == 0 or _lifts_task_limit():
        return None
    now = time.monotonic()
    if _counted and now - _counted[0] < TASK_COUNT_TTL_S and _counted[1] == soft:
        return soft, _counted[2]
    used = _tasks_of(os.getuid())
    _counted[:] = [now, soft, used]
    return soft, used


def _lifts_task_limit() -> bool:
    """Whether this process holds CAP_SYS_RESOURCE or CAP_SYS_ADMIN (the kernel then lets it
    past RLIMIT_NPROC)."""
    try:
        with open("/proc/self/status", encoding="utf-8", errors="replace") as f:
            caps = next((int(line.split()[1], 16) for line in f if line.startswith("CapEff:")), 0)
    except OSError:
        return False
    return bool(caps & ((1 << 24) | (1 << 21)))


def _tasks_of(uid: int) -> int:
    """Processes and threads whose real user is uid: what RLIMIT_NPROC counts (Linux's /proc;
    elsewhere this process's threads alone)."""
    if not os.path.isdir("/proc/self/task"):
        return threading.active_count()
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("Uid:", "Threads:")))
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, KeyError, ValueError):  # ended meanwhile, or hidden
            continue
    return total


def within_task_limit(threads: int | None) -> int | None:
    """DuckDB's ``threads`` for a new database: as asked (None: DuckDB's default, every core),
    but within the processes and threads the process may still start (task_room), less
    TASK_HEADROOM. DuckDB counts the thread that runs the query: N threads start N - 1."""
    room = task_room()
    if room is None:
        return threads
    limit, used = room
    free = limit - used - TASK_HEADROOM
    return max(1, min(threads or os.cpu_count() or 1, free + 1))


def check_task_room() -> None:
    """An InputError naming the limit on processes and threads when it leaves this process less
    than TASK_HEADROOM more: no command can run so (its imports start threads of their own)."""
    room = task_room()
    if room is not None and room[0] - room[1] < TASK_HEADROOM:
        from nsyscomm.errors import InputError

        raise InputError(task_limit_message(TASK_HEADROOM))


def task_limit_message(free_needed: int | None = None) -> str:
    """The one line that names the limit on processes and threads and what to change."""
    room = task_room()
    limit, used = room if room else (0, 0)
    need = f"; nsyscomm needs about {free_needed} more" if free_needed else ""
    return (
        f"the limit on processes and threads of this user (RLIMIT_NPROC, `ulimit -u`) is {limit} and "
        f"{used} run now{need}: raise it (e.g. `ulimit -u {max(2 * limit, 256)}`), or end some of the "
        f"user's processes"
    )


def out_of_tasks(e: BaseException) -> bool:
    """Whether e is a thread or process that could not be started for the lack of room under
    RLIMIT_NPROC (Python's thread start, a fork, or DuckDB's own thread start)."""
    import errno

    if isinstance(e, OSError) and e.errno == errno.EAGAIN:
        return True
    text = str(e)
    return "can't start new thread" in text or "Resource temporarily unavailable" in text


def quiet(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No progress bar on ``con`` (a per-connection setting: cursors need it too). With it on,
    the waiting thread asks every pipeline for its progress between tasks, under a lock: a visible share
    of a large summarize's cycles, for a bar nobody sees."""
    con.execute("SET enable_progress_bar = false")
    return con


def interrupted(e: BaseException) -> bool:
    """Whether Ctrl-C stopped DuckDB: its InterruptException; the RuntimeError its Python client
    raises instead when another thread's query took the signal; or the duckdb.Error that wraps a
    KeyboardInterrupt raised in Python code DuckDB was calling (scanning a registered pandas or
    Arrow table)."""
    return (
        isinstance(e, duckdb.InterruptException)
        or (isinstance(e, RuntimeError) and str(e).startswith("Query interrupted"))
        or (isinstance(e, duckdb.Error) and "KeyboardInterrupt" in str(e))
    )


def close_soon(con: duckdb.DuckDBPyConnection) -> None:
    """Close ``con`` on a thread of its own: freeing a large report's database takes time that the
    next steps need not wait for. Under a memory limit it closes now: the
    next report's database needs that memory, and the spill folder must be gone. The thread is
    not a daemon: a library caller's process waits for it before it exits (the nsyscomm program
    leaves without waiting: nsyscomm.__main__)."""
    if _limit() or not _room_for_threads(1):
        con.close()
    else:
        threading.Thread(target=con.close, name="nsyscomm-close").start()


def one_row(con: duckdb.DuckDBPyConnection, query: str, params: object = None) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate without GROUP BY, a setting)."""
    row = (con.execute(query) if params is None else con.execute(query, params)).fetchone()
    if row is None:
        raise RuntimeError(f"the query returned no row: {query}")
    return row


def scalar(con: duckdb.DuckDBPyConnection, query: str, params: object = None) -> Any:
    """The single value of a query that always returns one row (a count, a setting)."""
    return one_row(con, query, params)[0]


def threads(con: duckdb.DuckDBPyConnection) -> int:
    """How many threads the database's queries run on (its `threads` setting)."""
    return int(scalar(con, "SELECT current_setting('threads')"))


def on_cursor_soon(
    con: duckdb.DuckDBPyConnection, fn: Callable[[duckdb.DuckDBPyConnection], T], name: str
) -> Future[T]:
    """fn(cursor) on a thread of its own, with a cursor of its own (a DuckDB connection serves one
    thread at a time), made here and closed when fn returns: the future holds what fn returned."""
    cur = quiet(con.cursor())

    def run() -> T:
        try:
            return fn(cur)
        finally:
            cur.close()

    if not _room_for_threads(1):  # under the limit on threads: here and now, the same result
        done: Future[T] = Future()
        try:
            done.set_result(run())
        except Exception as e:  # noqa: BLE001 - handed over as the thread's would be
            done.set_exception(e)
        return done
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"nsyscomm-{name}")
    try:
        return pool.submit(run)
    finally:
        pool.shutdown(wait=False)


def _room_for_threads(n: int) -> bool:
    """Whether n more threads fit under the limit on tasks (task_room) with TASK_HEADROOM left."""
    room = task_room()
    return room is None or room[0] - room[1] - n >= TASK_HEADROOM


def input_bytes(paths: Iterable[str | os.PathLike]) -> int:
    """The size on disk of these inputs: a file's, a folder's files' (one level: a report
    folder of per-table files); one that cannot be read counts as large."""
    total = 0
    for p in paths:
        try:
            if os.path.isdir(p):
                total += sum(f.stat().st_size for f in Path(p).iterdir() if f.is_file())
            else:
                total += os.path.getsize(p)
        except OSError:
            return SMALL_INPUT_BYTES
    return total


@contextlib.contextmanager
def small_input(paths: Iterable[str | os.PathLike]) -> Iterator[bool]:
    """Inside the block, the databases this thread makes without a thread count of their own run
    on one thread when the inputs at paths are small (SMALL_INPUT_BYTES), and hand no memory
    back (release_duckdb_memory: a small job holds little). Yields whether they are."""
    small = input_bytes(paths) < SMALL_INPUT_BYTES
    token = _small_input.set(small)
    try:
        yield small
    finally:
        _small_input.reset(token)


@contextlib.contextmanager
def memory_limit(limit: str | None) -> Iterator[None]:
    """Set MEMORY_LIMIT_ENV for the databases made inside the block (and the worker processes
    started there), as it was afterwards."""
    if not limit:
        yield
        return
    with settings.set_within(MEMORY_LIMIT_ENV, limit):
        yield


_UNITS = {
    "bytes": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
}


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> int | None:
    """The memory limit of con's database in bytes (DuckDB shows it as, e.g., '143.0 MiB'); None
    when it states none or in a form not known here."""
    shown = str(scalar(con, "SELECT current_setting('memory_limit')"))
    try:
        value, unit = shown.split()
        return int(float(value) * _UNITS[unit])
    except (ValueError, KeyError):
        return None


def limited() -> bool:
    """Whether a memory limit is set for this process's databases."""
    return bool(_limit())


def _limit() -> str:
    """The memory limit set for this process's databases ("" when none)."""
    return settings.memory_limit()


def _share_of_ram(limit: str) -> str:
    try:
        share = float(limit[:-1]) / 100
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return limit  # DuckDB's message then says what it accepts
    return f"{max(1, int(ram * share / 1e6))}MB" if 0 < share <= 1 else limit


@functools.cache
def sql_dir() -> Path:
    """The top-level sql/ folder, one file per result table: the one place that knows where it is
    (installed as the package nsyscomm.sql; in a source checkout, beside the nsyscomm package;
    always the one of the same tree as this code: nsyscomm.bundled)."""
    from nsyscomm.bundled import bundled_dir

    return bundled_dir("sql", "collectives.sql")


@functools.cache
def sql(name: str) -> str:
    """Text of sql/<name>.sql."""
    return (sql_dir() / f"{name}.sql").read_text(encoding="utf-8")


@functools.cache
def _nullable_int() -> dict:
    import pandas as pd
    import pyarrow as pa

    return {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.uint8(): pd.UInt8Dtype(),
        pa.uint16(): pd.UInt16Dtype(),
        pa.uint32(): pd.UInt32Dtype(),
        pa.uint64(): pd.UInt64Dtype(),
    }


def frame(cur: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The pending result of ``cur`` as pandas, through Arrow, with the dtypes ``.df()`` gives
    (arrow_frame).

    ``.df()`` builds a Python str per string value, which pandas then turns back into Arrow
    (its default string dtype): through Arrow the strings are never made one by one."""
    return arrow_frame(cur.to_arrow_table())


def release_arrow_memory() -> None:
    """Hand back to the system the memory pyarrow's pool keeps after its tables are gone: its
    allocator keeps freed memory for later tables, and the tables a stage lets go of (the
    extraction's copies, the rows a job has moved into its database) are not read again."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def release_duckdb_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Hand back to the system the memory con's database keeps once its tables are dropped and
    its queries done. connect() has DuckDB's allocator keep freed memory (its flush thresholds),
    so that one query's memory serves the next without page faults; a stage calls this where
    what it let go of is not needed again (a report's rows once its calls are made, a part's
    working memory before the next part's). DuckDB flushes its allocator whenever the number of
    threads of its database changes: the count is set to one more and back. Not under a limit
    on tasks with no room for that thread: the memory then stays where it is, and nothing fails.
    Nor for a small input (small_input): what it would hand back is a few MB, for three queries.
    """
    if _small_input.get() or not _room_for_threads(1):
        return
    n = threads(con)
    con.execute(f"SET threads = {n + 1}")
    con.execute(f"SET threads = {n}")


def on_file(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether con's database is a file (connect's folder), not memory."""
    return bool(scalar(con, "SELECT path IS NOT NULL FROM duckdb_databases() WHERE database_name = current_database()"))


def frame_arrow(df: pd.DataFrame) -> pa.Table:
    """arrow_frame()'s way back: a pandas frame as an Arrow table without its index or pandas'
    schema metadata, as the sources hand over calls they built in pandas (Extract.calls)."""
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)


def arrow_frame(t: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas with the dtypes DuckDB's ``.df()`` gives: integers keep numpy
    dtypes unless they hold NULLs (then pandas' nullable ones); HUGEINT (DuckDB's sum of
    BIGINTs) arrives as a 128-bit decimal and becomes float64, and an all-NULL text column holds
    None."""
    # imported here: the reading stage (nsyscomm.ingest.nsys.reader) runs before pandas is loaded
    import pandas as pd
    import pyarrow as pa

    nullable_int = _nullable_int()
    cols = {}
    for name, col in zip(t.column_names, t.columns):
        typ = col.type
        if pa.types.is_decimal(typ) and typ.scale == 0:
            cols[name] = col.cast(pa.float64()).to_pandas()
        elif typ in nullable_int and col.null_count:
            cols[name] = col.to_pandas(types_mapper=nullable_int.get)
        elif (
            pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_null(typ)
        ) and col.null_count == len(col):
            cols[name] = pd.Series([None] * len(col), dtype=object)  # as .df(): all-NULL text is None
        else:
            cols[name] = col.to_pandas()
    if not cols:
        return pd.DataFrame(columns=t.column_names)
    if len(cols) < t.num_columns:  # a name twice: each place holds the last column of that name
        return pd.DataFrame(cols, columns=t.column_names, copy=False)
    # the columns' arrays, not their Series: pandas aligns Series on their index, which for a small
    # result cost more than the conversion. copy=False: the columns stay blocks of their own;
    # pandas would otherwise stack the integer columns into one 2D block, a copy of them all
    return pd.DataFrame({name: s.array for name, s in cols.items()}, copy=False)
