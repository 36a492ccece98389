"""The output folder of ``nsyscomm run``: one run's alone, and the job's user's alone.

A run reports and gates its own capture and nothing else, so a folder that already holds a run
(its nsys command, its log, a capture, an export, flight records or torch.profiler traces) is
refused before anything is written into it: importing "every capture in the folder" would
otherwise report the first run's, and nsys's ``-f true`` would overwrite the first run's report.
Two runs started at once into one folder are kept apart by a lock (``fcntl.flock`` on a file in
the folder, held for the whole run): the second is refused at once, before its nsys starts. The
lock is released by the kernel however the run ends, so a killed run leaves no lock to clean up;
what it leaves in the folder (its command, a partial capture) still marks the folder as used.

The folders nsyscomm makes for the job (the output folder when it is new, ``records/``) are
created for the job's user alone (0700, whatever the umask): the flight records name the job's
code and its collectives, and a world-writable folder would let another user plant records.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from nsyscomm.errors import InputError

LOCK_NAME = ".nsyscomm-run.lock"
COMMAND_NAME = "nsys-command.txt"
LOG_NAME = "nsyscomm-run.log"
PROGRAM_PROFILER_NOTE = "program-profiler.txt"  # the ranks whose own torch.profiler made their trace
RECORDS_DIR = "records"
# the names of the files a run writes beside its reports (besides records/*.ring)
RUN_FILES = (LOCK_NAME, COMMAND_NAME, LOG_NAME, PROGRAM_PROFILER_NOTE)
# what a run leaves in its folder: any of these means the folder holds a run
_RUN_MARKS = (COMMAND_NAME, LOG_NAME, "*.qdstrm", "*.nsys-rep", "report*.sqlite", "report*.arrow", "rank*.json.gz")
PRIVATE = 0o700
# the reason discovery gives for the files above and nsyscomm's JSON and HTML outputs
OWN_OUTPUT = "nsyscomm's own output"


def private_dir(path: Path) -> Path:
    """Make `path` (and its missing parents) a folder for this user alone: 0700 whatever the
    umask. A folder that existed before keeps its mode: it is the user's, not nsyscomm's."""
    path = Path(path)
    if path.is_dir():
        return path
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, PRIVATE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return path
    os.chmod(path, PRIVATE)  # mkdir's mode is masked by the umask; the chmod is not
    return path


def previous_run(out_dir: Path) -> list[Path]:
    """The files of a run already in out_dir (empty when it holds none)."""
    found = [f for pat in _RUN_MARKS for f in out_dir.glob(pat)]
    records = out_dir / RECORDS_DIR
    if records.is_dir():
        found += sorted(records.glob("*.ring"))
    return sorted(set(found))


def _refusal(out_dir: Path, files: list[Path]) -> InputError:
    names = ", ".join(f.relative_to(out_dir).as_posix() for f in files[:3])
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    return InputError(
        f"output folder {out_dir} already holds a run ({names}{more}): pass --output with a new "
        f"folder, or leave --output out for a fresh nsyscomm-DATE-TIME one"
    )


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def _lock(out_dir: Path, create: bool) -> int | None:
    """The folder's lock, taken (its descriptor); None when there is no lock file and not create.
    InputError when another run holds it."""
    flags = os.O_RDWR | (os.O_CREAT if create else 0)
    try:
        fd = os.open(out_dir / LOCK_NAME, flags, 0o600)
    except FileNotFoundError:
        if not create:
            return None
        raise
    except OSError as e:
        raise InputError(
            f"cannot write into the output folder {out_dir} ({e.strerror}): pass --output with a writable folder"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _holder(fd)
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            raise
        raise InputError(
            f"output folder {out_dir} is in use by another nsyscomm run{holder}: pass --output with another folder"
        ) from None
    return fd


@contextlib.contextmanager
def claimed(out_dir: Path) -> Iterator[Path]:
    """Hold out_dir for one run: refused (InputError) when another run holds it now or it holds a
    run already. Nothing is written into a refused folder."""
    out_dir = Path(out_dir)
    fd = _lock(out_dir, create=False)  # a run in progress is named as such, before its files
    try:
        files = previous_run(out_dir)
        if files:
            raise _refusal(out_dir, files)
        if fd is None:
            fd = _lock(out_dir, create=True)
            # the run before this one may have begun between the look above and the lock
            files = previous_run(out_dir)
            if files:
                raise _refusal(out_dir, files)
        if fd is not None:  # always: the lock is held here
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield out_dir
    finally:
        if fd is not None:
            os.close(fd)  # the lock goes with the descriptor


@contextlib.contextmanager
def held(out_dir: Path) -> Iterator[Path]:
    """Hold the folder of a run that is over, while a later command finishes its work there (the
    import of a capture it left): refused (InputError) while a run holds it."""
    fd = _lock(Path(out_dir), create=True)
    try:
        yield Path(out_dir)
    finally:
        if fd is not None:
            os.close(fd)
