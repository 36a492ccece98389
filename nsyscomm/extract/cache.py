"""A normalized Parquet cache of per-report extracts.

One entry per (report file, its size and mtime, the files its format reads along with it, the name it has in the job, the ingest code):
a folder with each per-report table (nsyscomm.ingest.extract_type.TABLES) as Parquet and
meta.json (report, session start, version, warnings); the exports of nsys reports
(nsyscomm.extract.nsys_rep) are kept in its exports/ folder. Entries live outside the input's
folder: ``$NSYSCOMM_CACHE_DIR``, else ``$XDG_CACHE_HOME/nsyscomm``, else ``~/.cache/nsyscomm``.
Writes go to a temporary folder renamed into place (atomic), readable by its owner only.

An entry is checked, not trusted: one owned by another user, writable by anyone else or holding
a symbolic link is ignored (a shared cache folder lets others plant entries: said once, and the
report extracted afresh); one whose key, tables, column types or values (the range checks a
fresh extract passes, nsyscomm.ingest.limits.checked) are not what this code writes is removed
and rebuilt.

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
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsyscomm import settings
from nsyscomm.ingest import paths

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

# the layout of an entry (meta.json and one Parquet file per table): the tables themselves are
# those of nsyscomm.ingest.extract_type.TABLES, whose module is part of the code fingerprint
CACHE_FORMAT = 8
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
            names.update(_SQL_READ.findall(f.read_text(encoding="utf-8")))
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
    ident = json.dumps(
        [str(Path(path).resolve()), st.st_size, st.st_mtime_ns, report, code_fingerprint(), _read_along(path)]
    )
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _read_along(path: Path) -> list:
    """The files its format reads along with a report (nsyscomm.ingest.formats: a trace's meta, the
    other dumps of an Inspector folder, which give it its ranks), each with its size and mtime:
    an extract made from them is stale once one of them changes."""
    from nsyscomm.ingest import formats

    fmt = formats.sniff(Path(path))
    if fmt is None:
        return []
    out = []
    for p in fmt.companions(Path(path)):
        try:
            st = p.stat()
            out.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), None, None])
    return out


def has(path: Path, report: str) -> bool:
    """Whether ``path`` named ``report`` has an entry of this user's (without reading it, nor
    importing pandas)."""
    try:
        entry = cache_dir() / key(path, report)
        return (entry / "meta.json").is_file() and _owned(entry)
    except OSError:
        return False


UNTRUSTED_NOTE = (
    "the extract cache holds entries of another user's, or writable by others: ignored, the reports "
    "extracted afresh; point NSYSCOMM_CACHE_DIR at a folder of your own"
)
_untrusted: list[Path] = []  # entries ignored as not this user's alone, in this process


def _owned(entry: Path) -> bool:
    """Whether the entry and every file in it belong to this user and no one else can write them
    (a symbolic link, which could point anywhere, counts against it)."""
    uid = os.getuid()
    for p in [entry, *entry.iterdir()]:
        st = os.lstat(p)
        if st.st_uid != uid or st.st_mode & 0o022 or stat.S_ISLNK(st.st_mode):
            return False
    return True


def _validated(extract: Extract, entry: Path, meta: dict, expected_key: str) -> Extract:
    """The extract of an entry, once its key, tables and values are what this code writes
    (ValueError or InputError when not)."""
    import pyarrow as pa

    from nsyscomm.ingest import limits
    from nsyscomm.ingest.extract_type import TABLES

    if meta.get("key") != expected_key or entry.name != expected_key:
        raise ValueError("key")
    kinds = {"BIGINT": pa.types.is_integer, "INTEGER": pa.types.is_integer, "BOOLEAN": pa.types.is_boolean}
    for t in TABLES:
        frame = getattr(extract, t.name)
        if frame is None:
            continue
        declared = {n: sql for n, sql, _ in t.columns}
        names = frame.column_names if t.arrow else list(frame.columns)
        if not set(names) <= declared.keys() or (not t.arrow and set(names) != declared.keys()):
            raise ValueError(f"{t.name}: columns")
        if t.arrow:
            for f in frame.schema:
                is_kind = kinds.get(declared[f.name], lambda ty: pa.types.is_string(ty) or pa.types.is_large_string(ty))
                if not (is_kind(f.type) or pa.types.is_null(f.type)):
                    raise ValueError(f"{t.name}.{f.name}: type")
    kept = list(extract.warnings)  # its names were cut when it was made: no second warning of it
    extract = limits.checked(extract, extract.path)
    extract.warnings = kept
    return extract


def load(path: Path, report: str, root: Path | None = None) -> Extract | None:
    """The cached Extract of ``path`` named ``report``, or None (missing or unreadable)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from nsyscomm.ingest.extract_type import TABLES, Extract

    root = root or cache_dir()
    try:
        entry = root / (expected := key(path, report))
        if not entry.is_dir():
            return None
        if not _owned(entry):
            _untrusted.append(entry)
            return None
    except OSError:
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != CACHE_FORMAT or meta.get("report") != report:
            raise ValueError("format")
        # each table as TABLES declares it: Arrow or pandas, None when the report had none
        frames: dict[str, Any] = {}
        for t in TABLES:
            f = entry / f"{t.name}.parquet"
            if t.name not in meta["frames"]:
                frames[t.name] = None
            elif t.arrow:  # as the extract holds them
                frames[t.name] = pq.read_table(paths.arrow_source(f)).replace_schema_metadata(None)
            else:
                frames[t.name] = pd.read_parquet(paths.arrow_source(f))
        extract = Extract(
            report=report,
            path=Path(path),
            session_start_utc_ns=meta["session_start_utc_ns"],
            nsys_version=meta["nsys_version"],
            warnings=list(meta["warnings"]),
            windowed=bool(meta.get("windowed", False)),
            **frames,
        )
        return _validated(extract, entry, meta, expected)
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
            with open(tmp / f"{name}.parquet", "wb") as f:  # a file: pyarrow takes only UTF-8 names
                if isinstance(df, pa.Table):
                    pq.write_table(df, f)
                else:
                    df.to_parquet(f, index=False)
            present.append(name)
        meta = {
            "format": CACHE_FORMAT,
            "key": entry.name,
            "report": extract.report,
            "source": str(Path(path).resolve()),
            "frames": present,
            "session_start_utc_ns": extract.session_start_utc_ns,
            "nsys_version": extract.nsys_version,
            "warnings": list(extract.warnings),
            "windowed": extract.windowed,
        }
        (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        for written in tmp.iterdir():  # this user's alone: an entry others can write is never read (_owned)
            os.chmod(written, 0o600)
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
    e = extract_one(path, report, threads, exports=cache_dir() / "exports" if cache else None)
    if cache:
        store(e, path)
        if _untrusted and UNTRUSTED_NOTE not in _said:  # once in a process
            _said.add(UNTRUSTED_NOTE)
            e.warnings.append(UNTRUSTED_NOTE)
    return e


_said: set[str] = set()
