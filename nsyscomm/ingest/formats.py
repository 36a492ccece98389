"""The input formats nsyscomm reads, in one registry that discovery (nsyscomm.discover) and the
reader choice (nsyscomm.extract.readers) both loop over: a format named here is found in a
folder, read, and named in the "no report" message, with nothing else to change. A format's
entry says how its files look (by name, and by content where the name is not enough), how one
is read into an Extract, and what is read along with it (CONTRIBUTING.md, "Adding an input
format"). The readers are imported only when a file of theirs is met."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract


def _no_files(path: Path) -> list[Path]:
    return []


def _nothing(path: Path) -> str | None:
    return None


@dataclass(frozen=True)
class Format:
    """One input format: how its files look, how one is read, and what goes with it."""

    name: str  # what a user calls it
    looks: str  # how its files look, for the messages
    # whether the reader takes path as one: by name and content, disjoint from the other formats'
    reads: Callable[[Path], bool]
    extract: Callable[[Path, str | None, int | None], Extract]  # (path, report name, DuckDB threads)
    # whether a file met in a folder is one (default: reads; a cheaper or stricter test where
    # that differs)
    in_folder: Callable[[Path], bool] | None = None
    # the reports in a folder that are not files met one by one (folders of per-table files)
    find: Callable[[Path], list[Path]] | None = None
    folders: bool = False  # a report may be a folder
    # discovery's full check of a file in_folder took: InputError when refused, which skips it
    # with that reason
    check: Callable[[Path], Any] | None = None
    companions: Callable[[Path], list[Path]] = _no_files  # the files read along with a report
    order: Callable[[Path], Any] | None = None  # the sort key of its reports in a folder
    refuse: Callable[[Path], str | None] = _nothing  # why a file of this format cannot be read as it is
    # why a folder's file that is no report, but is related to this format, is skipped
    # (path, the (folder, stem) of the reports read)
    unread: Callable[[Path, set[tuple[Path, str]]], str | None] | None = None
    superseded_by: str | None = None  # a format whose report of the same name is the same one, read instead
    help: Callable[[Path], str | None] | None = None  # the fix a folder without a report is told
    # what the format adds to the whole job beyond its extracts (a per-op trace for the what-if)
    op_trace: Callable[[list[Path]], Any] | None = None

    def claims(self, path: Path) -> bool:
        """Whether a file met in a folder is a report of this format."""
        return (self.in_folder or self.reads)(path)


# ---- nsys exports (nsyscomm.ingest.nsys)


def _sqlite_reads(path: Path) -> bool:
    from nsyscomm.ingest.nsys.reader import is_sqlite

    return is_sqlite(path)


def _sqlite_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    import sqlite3

    import duckdb

    from nsyscomm import duck
    from nsyscomm.errors import InputError
    from nsyscomm.ingest.nsys import extract as nsys_extract

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


def _nsys_rep_refused(path: Path) -> str | None:
    if path.suffix != ".nsys-rep":
        return None
    return (
        "an .nsys-rep is read through nsys, which is not on PATH (nor named by NSYSCOMM_NSYS); "
        f"export it where nsys is: nsys export --type sqlite --output {path.with_suffix('.sqlite')} {path}"
    )


def _nsys_rep_unread(path: Path, read_stems: set[tuple[Path, str]]) -> str | None:
    if path.suffix != ".nsys-rep":
        return None
    if (path.parent, path.stem) in read_stems:
        return "its export is read"
    return f"not exported, and nsys is not on PATH; export it with: nsys export --type sqlite {path}"


def _nsys_help(folder: Path) -> str:
    reps = sorted(folder.rglob("*.nsys-rep"))
    if reps:
        return f"its .nsys-rep files need nsys, which is not on PATH: export them first: nsys export --type sqlite {reps[0]}"
    return "point to a folder of nsys SQLite exports (*.sqlite)"


def _arrow_reads(path: Path) -> bool:
    from nsyscomm.ingest.nsys import arrow

    return arrow.is_export(path)


def _arrow_find(folder: Path) -> list[Path]:
    from nsyscomm.ingest.nsys import arrow

    return arrow.exports_in(folder)


def _arrow_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.nsys import extract as nsys_extract

    return nsys_extract.extract_arrow(path, report, threads)


# ---- the OSDI'25 straggler artifact's per-op traces (nsyscomm.ingest.straggler)


def _straggler_reads(path: Path) -> bool:
    from nsyscomm.ingest.straggler import trace

    return trace.is_trace(path)


def _straggler_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.straggler import trace

    return trace.extract(path, report)


def _straggler_meta(path: Path) -> list[Path]:
    from nsyscomm.ingest.straggler import trace

    return [trace.meta_path(path)]


def _straggler_job(files: list[Path]) -> Any:
    from nsyscomm.ingest.straggler import trace

    return trace.job_trace(files)


# ---- PyTorch profiler (Kineto) traces (nsyscomm.ingest.kineto)


def _kineto_named(path: Path) -> bool:
    from nsyscomm.ingest.kineto import trace

    return trace.is_trace(path)


def _kineto_in_folder(path: Path) -> bool:
    """A PyTorch profiler trace by its name and first bytes: one of the keys torch.profiler
    writes first. A JSON file of anything else (nsyscomm's own summary, a truth file, a config)
    is not one."""
    import gzip

    if not _kineto_named(path):
        return False
    try:
        opener: Callable[..., Any] = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return False
    return any(k in head for k in (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"'))


def _kineto_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.kineto import trace

    return trace.extract(path, report)


def _kineto_unread(path: Path, read_stems: set[tuple[Path, str]]) -> str | None:
    return "JSON, but not a PyTorch profiler trace" if _kineto_named(path) else None


# ---- PyTorch Flight Recorder dumps (nsyscomm.ingest.flight_recorder)


def _fr_reads(path: Path) -> bool:
    from nsyscomm.ingest.flight_recorder import dump

    return dump.looks_like(path)  # by name and first bytes: a refused dump says why


def _fr_check(path: Path) -> Any:
    from nsyscomm.ingest.flight_recorder import dump

    return dump.load_dump(path)


def _fr_order(path: Path) -> Any:
    from nsyscomm.ingest.flight_recorder import dump

    return (path.parent, dump.rank_of(path))


def _fr_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.flight_recorder import dump

    return dump.extract(path, report)


# ---- NCCL Inspector dumps (nsyscomm.ingest.inspector)


def _inspector_reads(path: Path) -> bool:
    from nsyscomm.ingest.inspector import records

    return records.looks_like(path)  # by name and first line: a refused dump says why


def _inspector_check(path: Path) -> Any:
    from nsyscomm.ingest.inspector import records

    return records.check_head(path)


def _inspector_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.inspector import reader

    return reader.extract(path, report)


def _inspector_siblings(path: Path) -> list[Path]:
    from nsyscomm.ingest.inspector import folder

    return [p for p in folder.dumps_in(path.parent) if p.resolve() != path.resolve()]


def _prom_reads(path: Path) -> bool:
    from nsyscomm.ingest.inspector import prom

    return prom.looks_like(path)


def _prom_extract(path: Path, report: str | None, threads: int | None) -> Extract:
    from nsyscomm.ingest.inspector import prom

    return prom.extract(path, report)


# In the order a folder's reports are read (the first format's files first: ranks in process
# order and the reference clock follow the report order).
FORMATS: list[Format] = [
    Format(
        "nsys SQLite export",
        "*.sqlite",
        _sqlite_reads,
        _sqlite_extract,
        # by its name: one that is not a good export is named by the reader's error
        in_folder=lambda p: p.suffix == ".sqlite",
        refuse=_nsys_rep_refused,
        unread=_nsys_rep_unread,
        help=_nsys_help,
    ),
    Format(
        "nsys Arrow export",
        "*.arrow, or a folder of per-table files",
        _arrow_reads,
        _arrow_extract,
        in_folder=lambda p: False,  # found by find, folders included
        find=_arrow_find,
        folders=True,
        superseded_by="nsys SQLite export",
    ),
    Format(
        "straggler trace",
        "trace-*.parquet beside its meta-*.yaml",
        _straggler_reads,
        _straggler_extract,
        companions=_straggler_meta,
        op_trace=_straggler_job,
    ),
    Format(
        "PyTorch profiler trace",
        "*.json, *.json.gz",
        _kineto_named,
        _kineto_extract,
        in_folder=_kineto_in_folder,
        unread=_kineto_unread,
    ),
    Format(
        "Flight Recorder dump",
        "a pickle named after its rank",
        _fr_reads,
        _fr_extract,
        check=_fr_check,
        order=_fr_order,
    ),
    Format(
        "NCCL Inspector dump",
        "<host>-pid<PID>.log, *.jsonl (either .gz)",
        _inspector_reads,
        _inspector_extract,
        check=_inspector_check,
        # the other dumps of its folder give its global rank and its communicators' members
        companions=_inspector_siblings,
    ),
    Format(
        "NCCL Inspector metrics",
        "nccl_inspector_metrics_*.prom (per-bucket means, no calls)",
        _prom_reads,
        _prom_extract,
    ),
]


def register(fmt: Format) -> Format:
    """Add a format, read after the ones already known."""
    FORMATS.append(fmt)
    return fmt


def by_name(name: str) -> Format:
    return next(f for f in FORMATS if f.name == name)


def sniff(path: Path) -> Format | None:
    """The format the reader reads path as, or None."""
    return next((f for f in FORMATS if f.reads(path)), None)


def is_report_folder(path: Path) -> bool:
    """Whether a folder is itself one report (a folder of per-table files)."""
    return path.is_dir() and any(f.folders and f.reads(path) for f in FORMATS)


def refusal(path: Path) -> str | None:
    """Why a file a format knows cannot be read as it is (an .nsys-rep not exported), or None."""
    return next((why for f in FORMATS if (why := f.refuse(path))), None)


def unread_reason(path: Path, read_stems: set[tuple[Path, str]]) -> str:
    """Why a folder's file that is no report is skipped."""
    for f in FORMATS:
        why = f.unread(path, read_stems) if f.unread else None
        if why:
            return why
    return "not a report"


def no_report_message(folder: Path) -> str:
    """A folder without a report: every format named, and the first fix a format offers."""
    kinds = "; ".join(f"{f.name}: {f.looks}" for f in FORMATS)
    fix = next((h for f in FORMATS if f.help and (h := f.help(folder))), "point to a folder of reports")
    return f"{folder}: no report in this folder ({kinds}); {fix}"


def op_trace(files: Iterable[str | os.PathLike]) -> Any:
    """What the job's formats add beyond their extracts (the what-if replay's per-op trace), or None."""
    paths = [Path(f) for f in files]
    for f in FORMATS:
        if f.op_trace is not None:
            got = f.op_trace(paths)
            if got is not None:
                return got
    return None
