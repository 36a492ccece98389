"""Job discovery, the pipeline's first stage: the paths a user gives (files, folders, globs)
-> the report files of one job, and the short names they carry through the job
(docs/architecture.md, "Pipeline")."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest.kineto import trace as kineto
from nsyscomm.ingest.nsys import arrow as nsys_arrow
from nsyscomm.ingest.straggler import trace as straggler_trace


def sample_reports_dir() -> Path:
    """The bundled sample reports of the same tree as this code (nsyscomm.bundled)."""
    from nsyscomm.bundled import bundled_dir

    return bundled_dir("sample_reports", "synthetic_ddp_4rank.sqlite")


def sample_jobs() -> list[Path]:
    """The bundled synthetic samples, one job each: a report file or a folder of per-node reports."""
    d = sample_reports_dir()
    return sorted([p for p in d.glob("*.sqlite")] + [p for p in d.iterdir() if p.is_dir() and any(p.glob("*.sqlite"))])


@dataclass
class Found:
    """What discovery made of the paths: the report files to read, and every other file met in
    a folder with the reason it is not read (a folder never drops a file without a word)."""

    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def discover(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[Path]:
    """Files, folders (searched recursively) and globs -> the report files, sorted."""
    return survey(paths).files


def survey(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> Found:
    """Files, folders (searched recursively) and globs -> the report files, and the files of the
    folders that are not read, each with its reason. With no paths: the first bundled sample job
    (the samples are several jobs: `nsyscomm summarize` with no input tours them one by one)."""
    if paths is None or (not isinstance(paths, (str, os.PathLike)) and len(paths) == 0):
        paths = [sample_jobs()[0]]
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = Found()
    for p in paths:
        p = Path(p)
        if p.is_dir() and nsys_arrow.is_export(p):  # one report: a folder of per-table files (issue 24)
            found.files.append(p)
            continue
        if p.is_dir():
            hits, skipped = _folder(p)
            found.files.extend(hits)
            found.skipped.extend(skipped)
        elif p.is_file():
            found.files.append(p)
        elif any(ch in str(p) for ch in "*?["):
            hits = sorted(Path(x) for x in glob.glob(str(p), recursive=True) if Path(x).is_file())
            if not hits:
                raise InputError(f"{p}: the pattern matches no file; check the path")
            found.files.extend(hits)
        else:
            raise InputError(f"{p}: no such file or folder; check the path")
    out, seen = [], set()
    for f in found.files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            out.append(f)
    found.files = out
    return found


# the report kinds a folder may hold, in the order their files are read (the first kind's files
# first: ranks in process order and the reference clock follow the report order)
_KINDS = (
    "nsys SQLite export",
    "nsys Arrow export",
    "straggler trace",
    "PyTorch profiler trace",
    "Flight Recorder dump",
)


def _folder(folder: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """A folder's report files of every kind, and each other file with why it is not read. Each
    file is judged by what it is, not by what else the folder holds: a folder mixing kinds is
    read whole, and whether its reports make one job is combine's question (combine/one_job.py)."""
    from nsyscomm.ingest.flight_recorder import dump as flight_recorder

    exports = nsys_arrow.exports_in(folder)
    export_dirs = [e for e in exports if e.is_dir()]
    by_kind: dict[str, list[Path]] = {k: [] for k in _KINDS}
    by_kind["nsys Arrow export"] = list(exports)
    companions: set[Path] = set()  # files read as part of another one (a trace's meta-*.yaml)
    others: list[Path] = []
    refused: list[tuple[Path, InputError]] = []
    for f in sorted(x for x in folder.rglob("*") if x.is_file()):
        if any(d in f.parents for d in export_dirs) or f in exports:
            continue
        if f.suffix == ".sqlite":  # by its name: one that is not a good export is named by the reader's error
            by_kind["nsys SQLite export"].append(f)
        elif straggler_trace.is_trace(f):
            by_kind["straggler trace"].append(f)
            companions.add(straggler_trace.meta_path(f))
        elif kineto.is_trace(f) and _looks_kineto(f):
            by_kind["PyTorch profiler trace"].append(f)
        elif flight_recorder.looks_like(f):
            try:
                flight_recorder.load_dump(f)
                by_kind["Flight Recorder dump"].append(f)
            except InputError as e:  # named with the reader's reason, not as "not a report"
                refused.append((f, e))
        else:
            others.append(f)
    by_kind["Flight Recorder dump"].sort(key=lambda p: (p.parent, flight_recorder.rank_of(p)))
    hits = [f for k in _KINDS for f in by_kind[k]]
    if not hits and refused:  # a folder of dumps, all refused: the first one's reason
        raise refused[0][1]
    if not hits:
        reps = sorted(folder.rglob("*.nsys-rep"))
        hint = (
            f"export them first: nsys export --type sqlite {reps[0]}"
            if reps
            else "point to a folder of nsys SQLite exports (*.sqlite)"
        )
        raise InputError(f"{folder}: no report (*.sqlite, or PyTorch profiler *.json/*.json.gz) in this folder; {hint}")
    skipped: list[tuple[Path, str]] = [(f, f"a Flight Recorder dump, refused: {e}") for f, e in refused]
    # the same nsys report exported twice (report.sqlite and report.arrow): read once
    sqlite_stems = {(f.parent, f.stem) for f in by_kind["nsys SQLite export"]}
    for f in list(by_kind["nsys Arrow export"]):
        if (f.parent, f.stem) in sqlite_stems:
            hits.remove(f)
            skipped.append((f, f"the same report as {f.stem}.sqlite, which is read"))
    read_stems = {(f.parent, f.stem) for f in hits}
    for f in others:
        if f in companions:
            continue
        if f.suffix == ".nsys-rep":
            why = (
                "its export is read"
                if (f.parent, f.stem) in read_stems
                else f"not exported; read it with: nsys export --type sqlite {f}"
            )
        elif kineto.is_trace(f):
            why = "JSON, but not a PyTorch profiler trace"
        else:
            why = "not a report"
        skipped.append((f, why))
    return hits, skipped


def _looks_kineto(path: Path) -> bool:
    """A PyTorch profiler trace by its first bytes: one of the keys torch.profiler writes first.
    A JSON file of anything else (nsyscomm's own summary, a truth file, a config) is not one."""
    import gzip

    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return False
    return any(k in head for k in (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"'))


def report_names(paths: list[Path]) -> list[str]:
    """Short, unique names for reports: the file name, or the path below the common folder."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
    return [str(p.resolve().relative_to(common)) for p in paths]
