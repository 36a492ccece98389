"""The profiled environment an nsys export records: read only when the user asks (``--include-env``).

nsys stores the profiled processes' environment variables and command lines in ``StringIds``
and describes the target in ``TARGET_INFO_SYSTEM_ENV``, ``META_DATA_CAPTURE`` and
``PROCESSES``. They can hold tokens and private paths, so nothing else in nsyscomm reads
these tables, and no output carries them unless the user passes ``--include-env``
(docs/architecture.md, "Facts about nsys exports", privacy).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_TABLES = ("TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE", "PROCESSES", "StringIds")


def _ro(path: Path) -> sqlite3.Connection:
    from nsyscomm.ingest.nsys.reader import read_only_uri

    con = sqlite3.connect(read_only_uri(path), uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    return con


def read(path: str | Path) -> dict:
    """One report's environment: {"system": {name: value}, "capture": {name: value},
    "processes": [{"pid", "name"}], "variables": ["NAME=value", ...]}. Empty parts when the
    tables are absent; a Kineto trace or an unreadable file gives {}."""
    path = Path(path)
    from nsyscomm.ingest.nsys import (
        arrow as nsys_arrow,  # an Arrow export, read through a temporary SQLite copy
    )

    if nsys_arrow.is_export(path):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="nsyscomm-") as tmp:
            copy = nsys_arrow.to_sqlite(path, Path(tmp) / "env.sqlite", wanted=_TABLES)
            return read(copy)
    try:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return {}
        con = _ro(path)
    except (OSError, sqlite3.Error):
        return {}
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        out: dict = {"system": {}, "capture": {}, "processes": [], "variables": []}
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            out["system"] = {
                str(n): v for n, v in con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV ORDER BY rowid")
            }
        if "META_DATA_CAPTURE" in tables:
            out["capture"] = {
                str(n): v for n, v in con.execute("SELECT name, value FROM META_DATA_CAPTURE ORDER BY rowid")
            }
        if "PROCESSES" in tables:
            out["processes"] = [
                {"pid": p, "name": n} for p, n in con.execute("SELECT pid, name FROM PROCESSES ORDER BY pid")
            ]
        if "StringIds" in tables:
            seen = set()
            for (v,) in con.execute("SELECT value FROM StringIds ORDER BY id"):
                if isinstance(v, str) and _ENV_VAR.match(v) and v not in seen:
                    seen.add(v)
                    out["variables"].append(v)
        return out
    except sqlite3.Error:
        return {}
    finally:
        con.close()


def for_reports(paths: Iterable[str | Path]) -> dict:
    """report file -> its environment, for every nsys export among ``paths``."""
    return {str(p): env for p in paths if (env := read(p))}
