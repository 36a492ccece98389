"""Job discovery, the pipeline's first stage: the paths a user gives (files, folders, globs)
-> the report files of one job, and the short names they carry through the job
(docs/architecture.md, "Pipeline")."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nsyscomm.capture import run_folder
from nsyscomm.errors import InputError
from nsyscomm.extract import nsys_rep
from nsyscomm.ingest import formats


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
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths) if paths is not None else []
    if not paths:
        paths = [sample_jobs()[0]]
    found = Found()
    for p in paths:
        p = Path(p)
        if formats.is_report_folder(p):  # one report: a folder of per-table files
            found.files.append(p)
            continue
        if p.is_dir():
            hits, skipped = _folder(p)
            found.files.extend(hits)
            found.skipped.extend(skipped)
        elif p.is_file():
            if _own_output(p):
                raise InputError(f"{p}: nsyscomm's own output, not a report; point to the reports it was made from")
            found.files.append(p)
        elif any(ch in str(p) for ch in "*?["):
            hits = sorted(Path(x) for x in glob.glob(str(p), recursive=True) if Path(x).is_file())
            if not hits:
                raise InputError(f"{p}: the pattern matches no file; check the path")
            own = [h for h in hits if _own_output(h)]
            refused = [(h, e) for h in hits if h not in own and (e := _refused(h)) is not None]
            if refused and len(refused) == len(hits) - len(own):  # nothing left to read: the first one's reason
                raise refused[0][1]
            found.files.extend(h for h in hits if h not in own and h not in dict(refused))
            found.skipped.extend((h, run_folder.OWN_OUTPUT) for h in own)
            found.skipped.extend((h, f"refused: {e}") for h, e in refused)
        else:
            raise InputError(f"{p}: no such file or folder; check the path")
    out, seen = [], set()
    for f in found.files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            out.append(f)
    # an .nsys-rep given beside its export (a glob over a run folder): the same report, read once
    exports = {(f.parent, f.stem) for f in out if f.suffix != nsys_rep.SUFFIX}
    twins = [f for f in out if f.suffix == nsys_rep.SUFFIX and (f.parent, f.stem) in exports]
    found.files = [f for f in out if f not in twins]
    found.skipped += [(f, formats.unread_reason(f, exports)) for f in twins]
    return found


def _refused(f: Path) -> InputError | None:
    """Why a file a pattern matched fails its format's checks (a truncated Flight Recorder dump),
    or None: set aside like a folder's, so that the other files of the pattern still read."""
    kind = next((k for k in formats.FORMATS if k.claims(f)), None)
    if kind is None or kind.check is None:
        return None
    try:
        kind.check(f)
    except InputError as e:
        return e
    return None


def _folder(folder: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """A folder's report files of every format (nsyscomm.ingest.formats, in its order), and
    each other file with why it is not read. Each file is judged by what it is, not by what else
    the folder holds: a folder mixing formats is read whole, and whether its reports make one job
    is combine's question (combine/one_job.py)."""
    kinds = list(formats.FORMATS)
    by_kind: dict[str, list[Path]] = {k.name: (k.find(folder) if k.find else []) for k in kinds}
    found_whole = [p for ps in by_kind.values() for p in ps]  # reports found as folders or files, first
    found_dirs = [p for p in found_whole if p.is_dir()]
    companions: set[Path] = set()  # files read as part of another one (a trace's meta-*.yaml)
    others: list[Path] = []
    refused: list[tuple[Path, str, InputError]] = []
    own: list[Path] = []
    for f in sorted(x for x in folder.rglob("*") if x.is_file()):
        if any(d in f.parents for d in found_dirs) or f in found_whole:
            continue
        if _own_output(f):
            own.append(f)
            continue
        kind = next((k for k in kinds if k.claims(f)), None)
        if kind is None:
            others.append(f)
            continue
        if kind.check is not None:
            try:
                kind.check(f)
            except InputError as e:  # named with the reader's reason, not as "not a report"
                refused.append((f, kind.name, e))
                continue
        by_kind[kind.name].append(f)
        companions.update(kind.companions(f))
    for k in kinds:
        if k.order is not None:
            by_kind[k.name].sort(key=k.order)
    hits = [f for k in kinds for f in by_kind[k.name]]
    reps = [f for f in others if nsys_rep.readable(f)]  # nsys reports nsys here can export
    if not hits and not reps and refused:  # a folder of reports, all refused: the first one's reason
        raise refused[0][2]
    if not hits and not reps:
        raise InputError(formats.no_report_message(folder))
    skipped: list[tuple[Path, str]] = [(f, f"a {name}, refused: {e}") for f, name, e in refused]
    skipped += [(f, run_folder.OWN_OUTPUT) for f in own]
    # the same report in two formats (report.sqlite and report.arrow): read once
    for k in kinds:
        if k.superseded_by is None:
            continue
        kept = {(f.parent, f.stem): f for f in by_kind[k.superseded_by]}
        for f in by_kind[k.name]:
            if (f.parent, f.stem) in kept:
                hits.remove(f)
                skipped.append((f, f"the same report as {kept[(f.parent, f.stem)].name}, which is read"))
    read_stems = {(f.parent, f.stem) for f in hits}
    # an nsys report is read through its export, unless the folder holds that export already
    reps = [f for f in reps if (f.parent, f.stem) not in read_stems]
    hits += reps
    skipped += [(f, formats.unread_reason(f, read_stems)) for f in others if f not in companions and f not in reps]
    return hits, skipped


# what nsyscomm writes into its JSON (a top-level key; the trace's otherData, at its end) and HTML
_OWN_MARKS = (b'"tool": "nsyscomm"', b'"tool":"nsyscomm"', b'<meta name="generator" content="nsyscomm')


def _own_output(path: Path) -> bool:
    """A file nsyscomm wrote, never a report: the run folder's own files by name (its lock,
    nsys command, log and flight-record rings), and the JSON and HTML it writes by their marker
    (a summary, a trace, a gate verdict or baseline, an HTML report), looked for in the first
    and the last 64 KiB."""
    if path.name in run_folder.RUN_FILES or (path.suffix == ".ring" and path.parent.name == run_folder.RECORDS_DIR):
        return True
    if path.suffix.lower() not in (".json", ".html", ".htm"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(len(head), size - (1 << 16)))
            tail = f.read()
    except OSError:
        return False
    return any(m in head or m in tail for m in _OWN_MARKS)


def report_names(paths: list[Path]) -> list[str]:
    """Short, unique names for reports: the file name, or the path below the common folder. Bytes
    of a name that are not UTF-8 are written as escapes (``\\xff``): a name is text every view,
    table and DuckDB string holds."""
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        common = Path(os.path.commonpath([str(p.resolve()) for p in paths]))
        names = [str(p.resolve().relative_to(common)) for p in paths]
    return [os.fsencode(n).decode("utf-8", "backslashreplace") for n in names]
