"""An nsys report (``.nsys-rep``) read like its export: when nsys is on PATH (or
``NSYSCOMM_NSYS`` names it), nsys exports the report the way ``nsyscomm run`` exports its own
(``nsys export --type arrow``, the format read fastest: nsyscomm.capture.exports) and the export
is read as any other.

The export goes into the extract cache's folder (nsyscomm.extract.cache), under ``exports/``
(the folder the reader is given), never beside the report, which is only read. Its name is a
hash of the report's identity (path, size, modification time) and of the nsys that made it, so
that a second read of the same report finds it; the export of an older version of the same file
is removed when a new one is written. It is written under a temporary name and renamed into
place, so that a reader never meets half an export. Without the cache (``--no-cache``) the
export is made in a temporary folder and removed once read. Without nsys the report is refused
as before, with the command that exports it (nsyscomm.ingest.formats)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from nsyscomm import settings
from nsyscomm.capture.exports import DEFAULT_EXPORT
from nsyscomm.capture.nsys_command import nsys_export_args
from nsyscomm.errors import InputError

SUFFIX = ".nsys-rep"
# how long one export may take: an hour-long capture of many GB exports in minutes
EXPORT_TIMEOUT_S = 3600


def nsys_path() -> str | None:
    """The nsys that exports reports: NSYSCOMM_NSYS, else nsys on PATH, else None."""
    return settings.nsys() or shutil.which("nsys")


def readable(path: Path) -> bool:
    """Whether path is an nsys report that nsys here can export."""
    return Path(path).suffix == SUFFIX and Path(path).is_file() and nsys_path() is not None


def _names(path: Path, nsys: str) -> tuple[str, str]:
    """(the prefix shared by every export of this path, the export's whole name)."""
    st = path.stat()
    where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    ident = json.dumps([st.st_size, st.st_mtime_ns, os.path.realpath(nsys), DEFAULT_EXPORT])
    return where, f"{where}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.{DEFAULT_EXPORT}"


@contextlib.contextmanager
def exported(path: Path, root: Path | None) -> Iterator[Path]:
    """The export of the report at path, made by nsys when root holds none yet; root None (or a
    folder that cannot be written): in a temporary folder, removed after the block."""
    path = Path(path)
    nsys = nsys_path()
    if nsys is None:
        raise InputError(f"{path}: nsys is not on PATH to export it; export it yourself: {_command('nsys', path)}")
    where, name = _names(path, nsys)
    if root is None:
        with tempfile.TemporaryDirectory(prefix="nsyscomm-export-") as scratch:
            _export(nsys, path, Path(scratch) / name)
            yield Path(scratch) / name
        return
    out = root / name
    if not out.is_file():
        try:
            root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        except OSError:  # no cache to write into: export into a temporary folder instead
            with exported(path, None) as tmp_out:
                yield tmp_out
            return
        try:
            _export(nsys, path, tmp / name)
            for old in root.glob(f"{where}-*"):  # an earlier version of the same file
                with contextlib.suppress(OSError):
                    old.unlink()
            os.replace(tmp / name, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    yield out


def _command(nsys: str, path: Path) -> str:
    return shlex.join([nsys, "export", "--type", "sqlite", "--output", str(path.with_suffix(".sqlite")), str(path)])


def _export(nsys: str, path: Path, out: Path) -> None:
    """nsys export of path into out; InputError naming the report when nsys cannot."""
    try:
        r = subprocess.run(
            nsys_export_args(nsys, DEFAULT_EXPORT, str(out), str(path)),
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"{path}: nsys export did not finish in {EXPORT_TIMEOUT_S} s; export it yourself: {_command(nsys, path)}"
        ) from None
    except OSError as e:
        raise InputError(
            f"{path}: cannot run {nsys} to export it ({e.strerror}); check NSYSCOMM_NSYS or PATH"
        ) from None
    if r.returncode != 0 or not out.is_file():
        said = " ".join((r.stderr or r.stdout or "").split())[-300:] or f"exit status {r.returncode}"
        raise InputError(f"{path}: nsys export failed on it ({said}); check that it is a whole nsys report")
