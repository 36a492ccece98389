"""Files nsyscomm writes (traces, HTML reports, exports, baselines, gate reports): written whole or
not at all, never over an input, never over a file the user did not name.

Each output is written to a temporary file beside its target, flushed to the disk, then renamed
over it: a full disk, a crash or Ctrl-C leaves the old file as it was and no partial one (a
rename within a folder is atomic on POSIX file systems). An export, which is a folder, is built
in a temporary folder beside it and moved in. Before anything is written, an output that is one
of the command's inputs (the same file under another name, a symlink or a hard link to it) is
refused, and so is one inside an input folder where the next run would read it back as a report.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.views.safe import visible_line

# what nsyscomm's own outputs are called when they lie in a folder of reports: its JSON and HTML
# carry a mark that discovery skips (nsyscomm.discover), and JUnit XML, Markdown and text are
# never read as reports; anything else (an export's Parquet and YAML, a file named .sqlite)
# would be read back as one
_NOT_READ_BACK = (".json", ".html", ".htm", ".xml", ".md", ".txt")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def shown(path: str | os.PathLike) -> str:
    """A path as a message shows it: bytes that are not UTF-8 (held as surrogate escapes) and
    control characters written as escapes, so that any file name prints on any terminal."""
    return visible_line(os.fspath(path))


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _input_paths(inputs: Iterable[str | os.PathLike]) -> Iterator[Path]:
    """The paths the inputs name, globs expanded as discovery expands them."""
    for i in inputs:
        p = Path(i)
        if not p.exists() and any(ch in os.fspath(p) for ch in "*?["):
            yield from (Path(x) for x in glob.glob(os.fspath(p), recursive=True))
        else:
            yield p


def check(
    output: str | os.PathLike,
    inputs: Iterable[str | os.PathLike],
    *,
    named: bool = True,
    flag: str = "-o",
    folder: bool = False,
    read_back: bool | None = None,
) -> Path:
    """Refuse (InputError, exit 2) an output that would destroy or pollute an input: one of the
    inputs itself (compared by device and inode, so symlinks and hard links count), an input
    folder itself, or a file inside an input folder that would be read back as a report.
    ``read_back``: whether it would be; by default a ``folder`` output would, and a file would
    unless it is named as nsyscomm's own outputs are. ``named``: whether the user gave this name;
    a default name that exists is never replaced. Returns the output as a Path."""
    out = Path(output)
    try:
        out_stat: os.stat_result | None = out.stat()
    except OSError:
        out_stat = None
    if out_stat is not None and not named:
        raise InputError(
            f"{shown(out)} exists and was not named: give {flag} {shown(out)} to replace it, or {flag} another name"
        )
    parent = (out if folder else out.parent).resolve()
    if read_back is None:
        read_back = folder or out.suffix.lower() not in _NOT_READ_BACK
    for inp in _input_paths(inputs):
        try:
            in_stat = inp.stat()
        except OSError:
            continue  # discovery names it; here only what exists can be overwritten
        if out_stat is not None and _same_file(out_stat, in_stat):
            harm = "writing into it would change the input" if folder else "writing it would destroy it"
            raise InputError(f"{shown(out)} is the input {shown(inp)}: {harm}; choose another {flag}")
        if not inp.is_dir():
            continue
        root = inp.resolve()
        if read_back and (parent == root or root in parent.parents):
            raise InputError(
                f"{shown(out)} lies in the input folder {shown(inp)}, where it would be read back as a report; "
                f"choose another {flag} outside it"
            )
    return out


def _refused_write(target: Path, e: OSError) -> OSError | InputError:
    """What a failed write tells the user: the file it was for, and that the old one stands."""
    if e.errno in _DISK_FULL:
        what = "no space left on the device" if e.errno == errno.ENOSPC else "disk quota exceeded"
        return InputError(
            f"{shown(target)}: {what}; nothing was written ({shown(target)} is as it was): free some space "
            f"or write elsewhere"
        )
    return OSError(e.errno, e.strerror or str(e), shown(target))


@contextlib.contextmanager
def _temporary_beside(target: Path, binary: bool) -> Iterator:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with open(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):  # a new file keeps the mode a plain open() would give it
            umask = os.umask(0)
            os.umask(umask)
            mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~umask
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def replacing(target: str | os.PathLike, binary: bool = False) -> Iterator:
    """A file object whose contents replace ``target`` when the block ends without an error, all
    at once; on any error (a full disk: exit 2 naming the file) the target is left as it was."""
    target = Path(target)
    try:
        with _temporary_beside(target, binary) as f:
            yield f
    except OSError as e:
        raise _refused_write(target, e) from e


def write_text(target: str | os.PathLike, text: str) -> Path:
    """``text`` (UTF-8) as the whole of ``target``, written whole or not at all."""
    with replacing(target) as f:
        f.write(text)
    return Path(target)


def append_text(target: str | os.PathLike, text: str) -> None:
    """``text`` added at the end of ``target`` whole or not at all: on a failed write the file is
    cut back to its old length. For files another program owns and reads by name while they grow
    (GitHub's $GITHUB_STEP_SUMMARY), which a rename would replace under it."""
    target = Path(target)
    data = text.encode("utf-8")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as e:
        raise _refused_write(target, e) from e
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise _refused_write(target, e) from e
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder(target: str | os.PathLike) -> Iterator[Path]:
    """A temporary folder beside ``target`` to write an output folder's files into. When the
    block ends without an error they become ``target``: the folder renamed into place when
    ``target`` does not exist, else each file moved over its namesake (each move atomic). On an
    error the temporary folder is removed and ``target`` is left as it was."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as e:
        raise _refused_write(target, e) from e
    try:
        try:
            yield tmp
            for f in tmp.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            if target.exists():
                for f in sorted(tmp.iterdir()):
                    os.replace(f, target / f.name)
            else:
                os.chmod(tmp, 0o777 & ~_umask())
                os.rename(tmp, target)
        except OSError as e:
            raise _refused_write(target, e) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
