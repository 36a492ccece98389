"""The choice of reader per report: an nsys SQLite export, an OSDI'25 per-op straggler trace,
a PyTorch profiler (kineto) trace or a Flight Recorder dump; anything else is a one-line
InputError naming the file and the fix."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb

from nsyscomm import duck
from nsyscomm.errors import InputError
from nsyscomm.ingest.kineto import trace as kineto
from nsyscomm.ingest.nsys import extract as nsys_extract
from nsyscomm.ingest.nsys import reader as nsys_reader
from nsyscomm.ingest.straggler import trace as straggler_trace


def extract_one(path: Path, report: str | None = None, threads: int | None = None) -> nsys_extract.Extract:
    """One source's extract, its names bounded and its values checked (ingest.limits, issue 26)."""
    from nsyscomm.ingest import limits

    return limits.checked(_extract_source(path, report, threads), path)


def _extract_source(path: Path, report: str | None = None, threads: int | None = None) -> nsys_extract.Extract:
    """One report -> its Extract, by the reader its content calls for."""
    if path.suffix == ".nsys-rep":
        raise InputError(
            f"{path}: an .nsys-rep is not read directly; "
            f"export it first: nsys export --type sqlite --output {path.with_suffix('.sqlite')} {path}"
        )
    from nsyscomm.ingest.nsys import arrow as nsys_arrow  # issue 24: nsys's Arrow exports, read without SQLite

    if nsys_arrow.is_export(path):
        return nsys_extract.extract_arrow(path, report, threads)
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty; profile again or export again with nsys export --type sqlite")
    if straggler_trace.is_trace(path):
        return straggler_trace.extract(path, report)
    if nsys_reader.is_sqlite(path):
        try:
            return nsys_extract.extract(path, report, threads)
        except (duckdb.Error, sqlite3.Error) as e:
            if isinstance(e, duckdb.OutOfMemoryException) or duck.interrupted(e):
                raise  # not the report's fault: memory ran out (the CLI says to raise the limit), or Ctrl-C
            # a damaged or truncated database: name it and say what to do, no traceback
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(
                f"{path}: cannot read this SQLite export ({first}); "
                f"export the report again with: nsys export --type sqlite REPORT.nsys-rep"
            ) from None
    if kineto.is_trace(path):
        return kineto.extract(path, report)
    from nsyscomm.ingest.flight_recorder import (
        dump as flight_recorder,  # issue 22: a Flight Recorder dump (restricted unpickler)
    )

    if flight_recorder.looks_like(path):  # by name and first bytes: a refused dump says why (issue 35)
        return flight_recorder.extract(path, report)
    raise InputError(f"{path}: not an nsys SQLite export; make one with: nsys export --type sqlite REPORT.nsys-rep")
