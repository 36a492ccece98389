"""The choice of reader per report, among the formats of nsyscomm.ingest.formats (nsys SQLite
and Arrow exports, OSDI'25 per-op straggler traces, PyTorch profiler traces, Flight Recorder
dumps), and nsys reports read through their export (nsyscomm.extract.nsys_rep); anything else
is a one-line InputError naming the file and the fix."""

from __future__ import annotations

from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.extract import nsys_rep
from nsyscomm.ingest import formats
from nsyscomm.ingest.extract_type import Extract


def extract_one(
    path: Path, report: str | None = None, threads: int | None = None, exports: Path | None = None
) -> Extract:
    """One source's extract, its names bounded and its values checked (ingest.limits); an nsys
    report is read through its export, kept in the folder exports (the cache's: extract.cache),
    else made in a temporary folder and removed once read (nsyscomm.extract.nsys_rep)."""
    from nsyscomm.ingest import limits

    path = Path(path)
    if nsys_rep.readable(path):
        with nsys_rep.exported(path, exports) as export:
            e = _extract_source(export, report or path.name, threads)
        e.path = path  # the report the user named, not its export in the cache
        return limits.checked(e, path)
    return limits.checked(_extract_source(path, report, threads), path)


def _extract_source(path: Path, report: str | None = None, threads: int | None = None) -> Extract:
    """One report -> its Extract, by the format its name and content call for (nsyscomm.ingest.formats)."""
    why = formats.refusal(path)
    if why:
        raise InputError(f"{path}: {why}")
    if not path.is_dir() and path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty; profile again or export again with nsys export --type sqlite")
    fmt = formats.sniff(path)
    if fmt is None:
        raise InputError(f"{path}: not an nsys SQLite export; make one with: nsys export --type sqlite REPORT.nsys-rep")
    return fmt.extract(path, report, threads)
