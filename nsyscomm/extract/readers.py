"""The choice of reader per report, among the formats of nsyscomm.ingest.formats (nsys SQLite
and Arrow exports, OSDI'25 per-op straggler traces, PyTorch profiler traces, Flight Recorder
dumps); anything else is a one-line InputError naming the file and the fix."""

from __future__ import annotations

from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.ingest import formats
from nsyscomm.ingest.extract_type import Extract


def extract_one(path: Path, report: str | None = None, threads: int | None = None) -> Extract:
    """One source's extract, its names bounded and its values checked (ingest.limits)."""
    from nsyscomm.ingest import limits

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
