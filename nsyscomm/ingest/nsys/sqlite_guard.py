"""What an SQLite report may hold before nsyscomm reads it, and how it is opened so that nothing
is written beside it, whatever the file holds.

* A view or a virtual table where nsys writes tables: reading one runs whatever query it holds
  (an endless recursive one never returns), and nsys exports never hold either. Refused, with
  one line, before any route reads a row (``check_tables``).
* A WAL-mode file: SQLite opens one, even read-only, by creating ``-shm`` (and ``-wal``) beside
  it. The Python and C readers open reports immutable (nsyscomm.ingest.nsys.reader.read_only_uri); DuckDB's
  SQLite scanner takes no URI, so it reads a private copy in rollback mode instead
  (``duckdb_path``); nsys never writes WAL files, so only a hand-made report pays for the copy.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from nsyscomm.errors import InputError

_FIX = "export the report again with: nsys export --type sqlite REPORT.nsys-rep"


def check_tables(con: sqlite3.Connection, path: Path) -> None:
    """Refuse a report holding a view or a virtual table: nsys exports hold neither, and reading
    one runs a query of the file's choosing (the schema is read, never a view's rows)."""
    row = con.execute(
        "SELECT type, name FROM sqlite_master WHERE type = 'view' "
        "OR (type = 'table' AND upper(ltrim(sql)) LIKE 'CREATE VIRTUAL%') LIMIT 1"
    ).fetchone()
    if row:
        kind = "a view" if row[0] == "view" else "a virtual table"
        raise InputError(
            f"{path}: {row[1]!r} is {kind}, which nsys exports never hold (reading it could run without end); {_FIX}"
        )


def is_wal(path: Path) -> bool:
    """Whether SQLite opens the file in WAL mode: header bytes 18 and 19 (write and read format
    versions) are 2."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and (head[18] == 2 or head[19] == 2)


_copies: list[str] = []


def duckdb_path(path: Path) -> Path:
    """The file DuckDB's SQLite scanner may open for the report at path without SQLite creating
    anything beside it: the report itself, or for a WAL-mode report a private copy switched to
    rollback mode (removed at exit). Like the immutable readers, the copy holds what the main
    file holds; a ``-wal`` beside the report is not read. DuckDB takes a path as UTF-8 text: a
    report whose path is not UTF-8 is reached through a symbolic link of a private folder."""
    if not is_wal(path):
        if _utf8(path):
            return path
        dst = _private_folder() / "report.sqlite"
        dst.symlink_to(Path(path).resolve())
        return dst
    dst = _private_folder() / "report.sqlite"
    shutil.copyfile(path, dst)
    with open(dst, "r+b") as f:
        f.seek(18)
        f.write(b"\x01\x01")
    return dst


def _utf8(path: Path) -> bool:
    try:
        os.fsencode(Path(path).resolve()).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _private_folder() -> Path:
    """A new folder of this process's, removed at exit."""
    d = tempfile.mkdtemp(prefix="nsyscomm-wal-")
    if not _copies:
        atexit.register(_remove_copies)
    _copies.append(d)
    return Path(d)


def _remove_copies() -> None:
    while _copies:
        shutil.rmtree(_copies.pop(), ignore_errors=True)
