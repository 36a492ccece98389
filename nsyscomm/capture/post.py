"""After the job of ``nsyscomm run``: nsys's import and export of each report, shown and logged.

Each stage (QdstrmImporter's import of a .qdstrm into a .nsys-rep, ``nsys export`` into SQLite
or Arrow, nsyscomm's summarize) shows on stderr what it is doing, for which report, its elapsed
time and the file sizes, when stderr is a terminal (a rich progress display; nothing otherwise),
and writes one line to ``nsyscomm-run.log`` in the output folder, so that a long export is
never a silent terminal and a slow one can be told apart afterwards. Per-rank reports are
imported and exported in parallel, as many at a time as there are usable cores (each nsys tool
runs on about one core).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from nsyscomm import settings
from nsyscomm.capture import run_folder
from nsyscomm.capture.exports import EXPORTS
from nsyscomm.capture.nsys_command import export_help, nsys_export_args
from nsyscomm.capture.run_folder import LOG_NAME

_SUFFIX = {"sqlite": ".sqlite", "arrow": ".arrow"}


def size_text(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n} B"


def _size(p: Path) -> int | None:
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        return p.stat().st_size
    except OSError:
        return None


class StageLog:
    """One line per stage in out_dir/nsyscomm-run.log, and a live line per report on a terminal."""

    def __init__(self, out_dir: Path, show: bool | None = None):
        self.path = Path(out_dir) / LOG_NAME
        self._lock = threading.Lock()
        self._progress = None
        if show is None:
            show = _stderr_is_terminal()
        if show:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> StageLog:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def line(self, text: str, echo: bool = True) -> None:
        """A line in the log (and, echo, above the live display on a terminal)."""
        # UTC to the millisecond: benchmarks/bench_capture.py takes the job's exit from it
        stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        with self._lock:
            try:
                with open(self.path, "a", encoding="utf-8", errors="backslashreplace") as f:
                    f.write(f"{stamp} {text}\n")
            except OSError:
                pass  # the log is a convenience: a full disk is reported by the stage itself
            if self._progress is not None and echo:
                self._progress.console.print(f"nsyscomm: {text}", highlight=False, markup=False)

    @contextlib.contextmanager
    def stage(self, name: str, src: Path | list, dst: Path | None = None) -> Iterator[Stage]:
        """Time one stage; its line says name, input(s) and sizes, elapsed time, output and size,
        and "ok" unless the stage raised or was marked failed (Stage.fail: a tool's exit status)."""
        srcs = src if isinstance(src, list) else [src]
        what = ", ".join(Path(s).name for s in srcs[:3]) + (f" (+{len(srcs) - 3})" if len(srcs) > 3 else "")
        in_size = sum(_size(Path(s)) or 0 for s in srcs)
        task = None
        progress = self._progress
        if progress is not None:
            task = progress.add_task(f"{name} {what} ({size_text(in_size)})", total=None)
        t0 = time.perf_counter()
        st = Stage()
        try:
            yield st
        except BaseException as e:
            st.status = "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed ({type(e).__name__})"
            raise
        finally:
            dt = time.perf_counter() - t0
            status = st.status
            out = f" -> {dst.name} {size_text(_size(dst))}" if dst is not None and dst.exists() else ""
            if progress is not None and task is not None:
                progress.remove_task(task)
            self.line(f"{name} {what} {size_text(in_size)}{out} {dt:.2f} s {status}")


class Stage:
    """A stage's outcome as its log line says it."""

    def __init__(self) -> None:
        self.status = "ok"

    def fail(self, why: str) -> None:
        self.status = f"failed ({why})"


def _stderr_is_terminal() -> bool:
    try:
        return os.isatty(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def import_and_export(
    out_dir: Path,
    nsys: str,
    warnings_: list,
    timeout: float = 1800,
    export: str = "sqlite",
    log: StageLog | None = None,
    jobs: int | None = None,
    base: str | None = None,
) -> list[Path]:
    """Turn every .qdstrm / .nsys-rep in out_dir into an export (export: "sqlite" or "arrow");
    return the exports, in report order. base: only the captures named base or base.rankN (a
    run's own, nsys's -o), not others that may lie beside them. Reports are worked on in parallel
    (jobs, default: the usable cores), each one's import before its export."""
    if export not in EXPORTS:
        raise ValueError(f"export must be one of {EXPORTS}, not {export!r}")
    log = log or StageLog(out_dir, show=False)
    stems = sorted({p.stem for p in out_dir.glob("*.qdstrm")} | {p.stem for p in out_dir.glob("*.nsys-rep")})
    if base is not None:
        stems = [s for s in stems if s == base or s.startswith(f"{base}.rank")]
    if not stems:
        return []
    jobs = max(1, min(len(stems), jobs or usable_cores()))
    lock = threading.Lock()
    found: list[str] = []

    def one(stem: str) -> Path | None:
        mine: list[str] = []
        try:
            rep = _import(out_dir / f"{stem}.qdstrm", out_dir / f"{stem}.nsys-rep", nsys, mine, timeout, log)
            return None if rep is None else _export(rep, export, nsys, mine, timeout, log)
        finally:
            with lock:
                found.extend(mine)

    if jobs == 1:
        outs = [one(s) for s in stems]
    else:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="nsyscomm-export") as pool:
            outs = list(pool.map(one, stems))
    warnings_.extend(found)
    return [o for o in outs if o is not None]


def _import(q: Path, rep: Path, nsys: str, warnings_: list, timeout: float, log: StageLog) -> Path | None:
    if q.exists() and not rep.exists():
        importer = find_importer(nsys)
        if importer is None:
            warnings_.append(
                f"{q.name}: nsys left only the .qdstrm and QdstrmImporter was not found "
                "(set NSYSCOMM_QDSTRM_IMPORTER to its path)"
            )
            return None
        with log.stage("import", q, rep) as st:
            r = subprocess.run([importer, "-i", str(q)], capture_output=True, text=True, timeout=timeout)
            if r.returncode != 0 or not rep.exists():
                st.fail(f"exit status {r.returncode}" if r.returncode else "no report written")
        if r.returncode != 0 or not rep.exists():
            warnings_.append(f"{q.name}: QdstrmImporter failed ({(r.stderr or r.stdout).strip()[-300:]})")
            return None
    if rep.exists() and q.exists():
        try:
            q.unlink()
        except OSError:
            pass
    return rep if rep.exists() else None


def _export(rep: Path, export: str, nsys: str, warnings_: list, timeout: float, log: StageLog) -> Path | None:
    out = rep.with_suffix(_SUFFIX[export])
    if out.exists() and out.stat().st_mtime >= rep.stat().st_mtime:
        return out
    with log.stage(f"export ({export})", rep, out) as st:
        r = subprocess.run(
            nsys_export_args(nsys, export, str(out), str(rep)),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode != 0 or not out.exists():
            st.fail(f"exit status {r.returncode}" if r.returncode else "no export written")
    if r.returncode != 0 or not out.exists():
        warnings_.append(
            f"{rep.name}: nsys export failed ({(r.stderr or r.stdout).strip()[-300:]}); "
            f"the report is kept: export it later with: "
            f"{shlex.join(nsys_export_args('nsys', export, str(out), str(rep), export_help(nsys)))}"
        )
        return None
    return out


def importer_candidates(nsys: str) -> list[str]:
    """Where QdstrmImporter may be, first to last: NSYSCOMM_QDSTRM_IMPORTER, then beside this nsys
    (``host-linux-x64`` in Nsight Systems installs, ``linux-desktop-glibc_*`` in the copy inside
    Nsight Compute: docs/architecture.md, "Facts about nsys installs"), then the usual install
    folders, then PATH."""
    real = Path(os.path.realpath(nsys))
    cands = [settings.qdstrm_importer()]
    for up in (real.parent, real.parent.parent, real.parent.parent.parent):
        for pattern in ("host-linux-*", "linux-desktop-glibc_*"):
            cands += sorted(glob.glob(str(up / pattern / "QdstrmImporter")))
    cands += glob.glob("/usr/lib/nsight-systems/host-linux-*/QdstrmImporter")
    for root in ("/opt/nvidia/nsight-systems/*/host-linux-*", "/opt/nvidia/nsight-compute/*/host/linux-desktop-*"):
        cands += sorted(glob.glob(f"{root}/QdstrmImporter"), reverse=True)
    cands += [shutil.which("QdstrmImporter") or ""]
    return [c for c in cands if c]


def find_importer(nsys: str) -> str | None:
    for c in importer_candidates(nsys):
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def unimported(folder: Path) -> list[Path]:
    """The captures a run left in its folder without a report: nsys wrote them after the run
    was stopped (killed, or hung up) before it could import them."""
    if not (folder / run_folder.COMMAND_NAME).is_file():
        return []
    return [q for q in sorted(folder.glob("report*.qdstrm")) if not q.with_suffix(".nsys-rep").exists()]


def finish_unimported(folder: Path, export: str) -> list[Path]:
    """Import and export the captures an interrupted run left in folder (unimported); the exports.
    InputError, naming the capture and the commands that import it, when nsys or its importer is
    not found or the import fails."""
    from nsyscomm.capture.nsys_command import find_nsys
    from nsyscomm.errors import InputError

    captures = unimported(folder)
    if not captures:
        return []
    nsys: str | None
    try:
        nsys = find_nsys()[0]
    except InputError:
        nsys = None
    q = captures[0]
    by_hand = (
        f"import it with: QdstrmImporter -i {shlex.quote(str(q))}, then: "
        f"{shlex.join(nsys_export_args('nsys', export, str(q.with_suffix(_SUFFIX[export])), str(q.with_suffix('.nsys-rep'))))}"
    )
    if nsys is None or find_importer(nsys) is None:
        missing = "nsys" if nsys is None else "QdstrmImporter (set NSYSCOMM_QDSTRM_IMPORTER to its path)"
        raise InputError(f"{q}: a capture an interrupted run left unimported, and {missing} is not found; {by_hand}")
    print(
        f"nsyscomm: importing {', '.join(c.name for c in captures)}, left unimported by an interrupted run in {folder}",
        file=sys.stderr,
        flush=True,
    )
    warnings_: list[str] = []
    with run_folder.held(folder):
        exports = import_and_export(folder, nsys, warnings_, export=export, base="report")
    if len(exports) < len(captures):
        raise InputError(f"{q}: {warnings_[0] if warnings_ else 'the import failed'}; {by_hand}")
    return exports
