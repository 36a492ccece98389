"""This process's folders under the temporary base (NSYSCOMM_TEMP_DIR, else the system's temporary
folder), never beside a report nor in the current folder: where each DuckDB database spills
(``nsyscomm-spill-<host>-<pid>-<n>``, which DuckDB makes on the first spill and removes when the
database closes) and where a large job's database is a file (``nsyscomm-job-<host>-<pid>-<n>``,
readable by its user only).

A job folder goes when its database is closed and freed, and in any case at the process's exit,
however it exits: a normal return, an error, Ctrl-C, SIGTERM (which raises Terminated while a job
folder exists, so that the exit unwinds as Ctrl-C's does). A process killed outright (SIGKILL, the
out-of-memory killer) removes nothing: the next nsyscomm process to open a database removes the
folders of either kind whose process has ended (``sweep``): its user's, of its host (a temporary
folder shared by several machines holds their folders too, and their processes' numbers mean
nothing here)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import re
import shutil
import signal
import tempfile
import threading
import weakref
from typing import Any

from nsyscomm import settings
from nsyscomm.errors import Terminated

SPILL_PREFIX = "nsyscomm-spill-"
JOB_PREFIX = "nsyscomm-job-"
# <prefix><host>-<pid>-<n>: the machine and process that made the folder, and its count of them
_OURS = re.compile(rf"^(?:{SPILL_PREFIX}|{JOB_PREFIX})(.+)-(\d+)-\d+$")
_numbers = itertools.count()
_job_folders: dict[str, Any] = {}  # path -> its database's finalizer (None until one is made)
_lock = threading.Lock()


def base() -> str:
    """The folder the spill and job folders are made in."""
    return settings.temp_dir() or tempfile.gettempdir()


@functools.cache
def _host() -> str:
    """This machine's name as a folder name may hold it."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", os.uname().nodename if hasattr(os, "uname") else "") or "host"


def _own(prefix: str) -> str:
    """The start of the names of this process's folders of a kind (prefix)."""
    return f"{prefix}{_host()}-{os.getpid()}-"


def _name(prefix: str) -> str:
    return f"{_own(prefix)}{next(_numbers)}"


def spill_folder() -> str:
    """A new spill folder's path for a DuckDB database (not made here: DuckDB makes it when it
    first spills)."""
    return os.path.join(base(), _name(SPILL_PREFIX))


def job_folder() -> str | None:
    """A new folder for a job's database, made now, readable by this user only; removed with
    the database (remove_with) or at the exit. None where none can be made (the base not
    writable, or a path DuckDB cannot take: it takes paths as UTF-8 text)."""
    sweep()
    root = base()
    path = os.path.join(root, _name(JOB_PREFIX))
    try:
        os.fsencode(path).decode("utf-8")
        os.makedirs(root, exist_ok=True)
        os.mkdir(path, 0o700)
    except (OSError, UnicodeError):
        return None
    with _lock:
        first = not _job_folders
        _job_folders[path] = None
    if first:
        _sigterm_raises()
    return path


def remove_with(path: str, con: object) -> None:
    """Remove the job folder at path once con (its database's connection) is freed."""
    fin = weakref.finalize(con, _remove, path)
    fin.atexit = False  # at the exit, remove_all closes the database first
    _job_folders[path] = fin


def remove_now(path: str) -> None:
    """Remove the job folder at path now (its database could not be made)."""
    _remove(path)


def remove_all() -> None:
    """Close the databases of the job folders left and remove the folders (at the exit; a
    process forked from this one has the list too, not the folders)."""
    for path, fin in list(_job_folders.items()):
        if not os.path.basename(path).startswith(_own(JOB_PREFIX)):
            continue
        con = fin.peek()[0] if fin is not None and fin.alive else None
        if con is not None:
            # closed first: an open database writes its file and its log until it is closed
            with contextlib.suppress(Exception):
                con.close()
        _remove(path)


def remove_spill_folders() -> None:
    """Remove this process's spill folders: for a process that leaves without closing its
    databases (nsyscomm.__main__), which would have removed them."""
    root = base()
    mine = _own(SPILL_PREFIX)
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if name.startswith(mine):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


atexit.register(remove_all)


def _remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _lock:
        _job_folders.pop(path, None)
        last = not _job_folders
    if last:
        _sigterm_default()


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def _sigterm_raises() -> None:
    """SIGTERM raises Terminated while a job folder exists (only the main thread may set a
    handler; a handler of the caller's own, or SIGTERM ignored, is left as it is)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)


def _sigterm_default() -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def holds_sigterm() -> bool:
    """Whether SIGTERM is this module's to handle now (a job folder exists): a block that set
    its own handler leaves this one in place when it ends (nsyscomm.extract.workers)."""
    return bool(_job_folders)


def raise_terminated_handler() -> Any:
    """The handler that raises Terminated, to restore where a block replaced it."""
    return _raise_terminated


@functools.cache
def sweep() -> None:
    """Once per process: remove this user's spill and job folders whose process has ended (killed
    before it could remove them). A folder of a live process, or of another user's, stays."""
    root = base()
    try:
        names = os.listdir(root)
    except OSError:
        return
    if not hasattr(os, "getuid"):  # not a Unix: no owner nor process test as below
        return
    uid = os.getuid()
    for name in names:
        m = _OURS.match(name)
        if m is None or m.group(1) != _host() or int(m.group(2)) == os.getpid():
            continue
        path = os.path.join(root, name)
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue
        if owner == uid and not _alive(int(m.group(2))):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True
