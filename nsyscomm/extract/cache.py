"""A normalized Parquet cache of per-report extracts.

One entry per (report file, its size and mtime, the name it has in the job, the ingest code):
a folder with each per-report table (nsyscomm.ingest.extract_type.TABLES) as Parquet and
meta.json (report, session start, version, warnings). Entries live outside the input's
folder: ``$NSYSCOMM_CACHE_DIR``, else ``$XDG_CACHE_HOME/nsyscomm``, else ``~/.cache/nsyscomm``.
Writes go to a temporary folder renamed into place (atomic); an unreadable entry is ignored,
removed and rebuilt.

Like the report itself, an entry holds only what the ingest kept (no environment strings from
StringIds or the metadata tables).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsyscomm import settings

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

# the layout of an entry (meta.json and one Parquet file per table): the tables themselves are
# those of nsyscomm.ingest.extract_type.TABLES, whose module is part of the code fingerprint
CACHE_FORMAT = 7
# SQL files the extraction reads, named in its code as duck.sql("name")
_SQL_READ = re.compile(r"""duck\.sql\(\s*["']([A-Za-z0-9_]+)["']\s*\)""")


def cache_dir() -> Path:
    d = settings.cache_dir()
    if d:
        return Path(d)
    xdg = os.environ.get("XDG_CACHE_HOME")  # the XDG base directory standard's, not ours
    return (Path(xdg) if xdg else Path.home() / ".cache") / "nsyscomm"


def extraction_code() -> list[Path]:
    """The files an extract is made from: the ingest (Python and the C scan's source), the
    reader choice, the helpers they share, and only the SQL files that code reads; the SQL of a
    result table is combine's and the analyses', which run on every load anyway."""
    from nsyscomm import duck

    root = Path(__file__).resolve().parent.parent  # the nsyscomm package
    code = sorted((root / "ingest").rglob("*.py")) + sorted((root / "ingest").rglob("*.c"))
    code += sorted((root / "extract").glob("*.py")) + [root / "duck.py", root / "schema.py"]
    names: set[str] = set()
    for f in code:
        try:
            names.update(_SQL_READ.findall(f.read_text()))
        except (OSError, UnicodeDecodeError):
            pass
    return code + [duck.sql_dir() / f"{n}.sql" for n in sorted(names)]


@functools.cache
def code_fingerprint() -> str:
    """Hash of the code that makes an extract (extraction_code): a new version never reads
    entries an older one wrote."""
    from nsyscomm import __version__

    h = hashlib.sha256(f"{CACHE_FORMAT}:{__version__}".encode())
    for f in extraction_code():
        try:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


def key(path: Path, report: str) -> str:
    st = Path(path).stat()
    ident = json.dumps([str(Path(path).resolve()), st.st_size, st.st_mtime_ns, report, code_fingerprint()])
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def has(path: Path, report: str) -> bool:
    """Whether ``path`` named ``report`` has an entry (without reading it, nor importing pandas)."""
    try:
        return (cache_dir() / key(path, report) / "meta.json").is_file()
    except OSError:
        return False


def load(path: Path, report: str, root: Path | None = None) -> Extract | None:
    """The cached Extract of ``path`` named ``report``, or None (missing or unreadable)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from nsyscomm.ingest.extract_type import TABLES, Extract

    root = root or cache_dir()
    try:
        entry = root / key(path, report)
    except OSError:
        return None
    if not entry.is_dir():
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT or meta.get("report") != report:
            raise ValueError("format")
        # each table as TABLES declares it: Arrow or pandas, None when the report had none
        frames: dict[str, Any] = {}
        for t in TABLES:
            f = entry / f"{t.name}.parquet"
            if t.name not in meta["frames"]:
                frames[t.name] = None
            elif t.arrow:  # as the extract holds them
                frames[t.name] = pq.read_table(f).replace_schema_metadata(None)
            else:
                frames[t.name] = pd.read_parquet(f)
        return Extract(
            report=report,
            path=Path(path),
            session_start_utc_ns=meta["session_start_utc_ns"],
            nsys_version=meta["nsys_version"],
            warnings=list(meta["warnings"]),
            windowed=bool(meta.get("windowed", False)),
            **frames,
        )
    except Exception:  # noqa: BLE001 - a damaged entry is rebuilt, never an error
        shutil.rmtree(entry, ignore_errors=True)
        return None


def store(extract: Extract, path: Path, root: Path | None = None) -> Path | None:
    """Write ``extract`` as the entry of ``path``; returns the entry, None when the cache is not
    writable (the cache is an optimization: never an error)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nsyscomm.ingest.extract_type import TABLES

    root = root or cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        entry = root / key(path, extract.report)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError:
        return None
    try:
        present = []
        for name in (t.name for t in TABLES):
            df = getattr(extract, name)
            if df is None:
                continue
            if isinstance(df, pa.Table):
                pq.write_table(df, tmp / f"{name}.parquet")
            else:
                df.to_parquet(tmp / f"{name}.parquet", index=False)
            present.append(name)
        meta = {
            "format": CACHE_FORMAT,
            "report": extract.report,
            "source": str(Path(path).resolve()),
            "frames": present,
            "session_start_utc_ns": extract.session_start_utc_ns,
            "nsys_version": extract.nsys_version,
            "warnings": list(extract.warnings),
            "windowed": extract.windowed,
        }
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(tmp, entry)
        except OSError:  # another process wrote the same entry first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return entry
    except Exception:  # noqa: BLE001
        shutil.rmtree(tmp, ignore_errors=True)
        return None


def cached_extract(path: Path, report: str, cache: bool = True, threads: int | None = None) -> Extract:
    """Extract of one report through the cache (``cache=False``: always extract, never write);
    ``threads``: DuckDB's threads for the extraction (default: every core)."""
    from nsyscomm.extract.readers import extract_one  # imports duckdb: only on a miss

    path = Path(path)
    if cache:
        hit = load(path, report)
        if hit is not None:
            return hit
    e = extract_one(path, report, threads)
    if cache:
        store(e, path)
    return e
