"""Job discovery, the pipeline's first stage: the paths a user gives (files, folders, globs)
-> the report files of one job, and the short names they carry through the job
(docs/architecture.md, "Pipeline")."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest import kineto, straggler_trace
from nsyscomm.ingest.nsys import arrow as nsys_arrow


def sample_reports_dir() -> Path:
    """The bundled sample reports of the same tree as this code (nsyscomm.bundled)."""
    from nsyscomm.bundled import bundled_dir

    return bundled_dir("sample_reports", "synthetic_ddp_4rank.sqlite")


def sample_jobs() -> list[Path]:
    """The bundled synthetic samples, one job each: a report file or a folder of per-node reports."""
    d = sample_reports_dir()
    return sorted([p for p in d.glob("*.sqlite")] + [p for p in d.iterdir() if p.is_dir() and any(p.glob("*.sqlite"))])


def discover(paths: str | os.PathLike | Iterable[str | os.PathLike] | None) -> list[Path]:
    """Files, folders (searched recursively) and globs -> the report files, sorted."""
    if paths is None or (not isinstance(paths, (str, os.PathLike)) and len(paths) == 0):
        paths = [sample_reports_dir()]
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir() and nsys_arrow.is_export(p):  # one report: a folder of per-table files (issue 24)
            found.append(p)
            continue
        if p.is_dir():
            hits = sorted(x for x in p.rglob("*.sqlite") if x.is_file())
            if not hits:  # nsys's Arrow exports (issue 24)
                hits = nsys_arrow.exports_in(p)
            if not hits:  # per-op traces of the OSDI'25 what-if artifact (trace-*.parquet + meta-*.yaml)
                hits = sorted(x for x in p.rglob("trace-*.parquet") if straggler_trace.is_trace(x))
            if not hits:  # PyTorch profiler traces, one per rank (nsyscomm.ingest.kineto)
                hits = sorted(x for x in p.rglob("*") if x.is_file() and kineto.is_trace(x))
            if not hits:  # PyTorch Flight Recorder dumps, one per rank (issue 22)
                from nsyscomm.ingest import flight_recorder

                hits = flight_recorder.dumps_in(p)
            if not hits:
                reps = sorted(p.rglob("*.nsys-rep"))
                hint = (
                    f"export them first: nsys export --type sqlite {reps[0]}"
                    if reps
                    else "point to a folder of nsys SQLite exports (*.sqlite)"
                )
                raise InputError(
                    f"{p}: no report (*.sqlite, or PyTorch profiler *.json/*.json.gz) in this folder; {hint}"
                )
            found.extend(hits)
        elif p.is_file():
            found.append(p)
        elif any(ch in str(p) for ch in "*?["):
            hits = sorted(Path(x) for x in glob.glob(str(p), recursive=True) if Path(x).is_file())
            if not hits:
                raise InputError(f"{p}: the pattern matches no file; check the path")
            found.extend(hits)
        else:
            raise InputError(f"{p}: no such file or folder; check the path")
    out, seen = [], set()
    for f in found:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            out.append(f)
    return out


def report_names(paths: list[Path]) -> list[str]:
    """Short, unique names for reports: the file name, or the path below the common folder."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
    return [str(p.resolve().relative_to(common)) for p in paths]
