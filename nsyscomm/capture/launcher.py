"""``nsyscomm run``: run a command under nsys with the collective wrapper active in every Python process.

    from nsyscomm.capture.launcher import run
    res = run(["torchrun", "--standalone", "--nproc-per-node", "4", "train.py"])
    res.exit_code, res.output_dir, res.reports        # reports: the exported files

The wrapper is injected with a ``sitecustomize`` on PYTHONPATH (nsyscomm/capture/_hook): it
annotates once torch is imported, so the user's code is unchanged and processes without torch
pay nothing. nsys follows the whole process tree (one report for torchrun and its workers);
``per_rank=True`` rewrites a torchrun command so that each worker runs under its own nsys
(``torchrun ... --no-python nsys profile ... python script.py``), one report per rank.
When nsys leaves only a ``.qdstrm`` (Debian/Ubuntu packages cannot find their importer),
the launcher runs QdstrmImporter itself, then ``nsys export --type sqlite``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nsyscomm.capture import job_tree, job_wait, program_profile, run_folder
from nsyscomm.capture.beside_job import BESIDE_NICE, Beside, nice_this_thread  # noqa: F401 - callers import these here
from nsyscomm.capture.capture_watch import CaptureWatch, advice
from nsyscomm.capture.exports import DEFAULT_EXPORT
from nsyscomm.capture.job_tree import JobTree
from nsyscomm.capture.nsys_command import (
    find_nsys,
    has_gpu,
    job_env,
    nsys_profile_args,
    preset_options,
    torchrun_split,
    trace_for,
)
from nsyscomm.capture.nsys_output import FilteredOutput
from nsyscomm.capture.post import (  # noqa: F401 - callers import these here
    EXPORTS,
    StageLog,
    find_importer,
    import_and_export,
    size_text,
)
from nsyscomm.errors import InputError


@dataclass
class RunResult:
    exit_code: int
    output_dir: Path
    reports: list = field(default_factory=list)  # exported .sqlite files
    warnings: list = field(default_factory=list)
    command: list = field(default_factory=list)  # the nsys command line that ran


# ---------------------------------------------------------------- nsys discovery


def _parse_steps(steps: str) -> tuple[int, int]:
    """--steps by nsyscomm.steps' rule, bounded for the capture range (from step 0, to no end)."""
    from nsyscomm.steps import parse_step_range

    try:
        lo, hi = parse_step_range(steps) or (None, None)
    except ValueError as e:
        raise InputError(f"--steps {e} (for example --steps 10:20 captures steps 10..19)") from None
    if lo is not None and lo < 0:
        raise InputError(f"--steps {steps!r}: steps are numbered from 0 (A:B captures A..B-1)")
    return (lo or 0), (1 << 62 if hi is None else hi)


# ---------------------------------------------------------------- torchrun rewriting (--per-rank)


# ---------------------------------------------------------------- run


def _check_output(output: str | None) -> Path:
    if output:
        out = Path(output).expanduser()
    else:
        out = Path.cwd() / time.strftime("nsyscomm-%Y%m%d-%H%M%S")
        k = 1
        base = out
        while out.exists():
            out = Path(f"{base}-{k}")
            k += 1
    try:
        run_folder.private_dir(out)
        probe = out / ".nsyscomm-write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as e:
        raise InputError(
            f"output folder {out} is not writable ({e.strerror}): pass --output with a writable folder"
        ) from None
    return out.resolve()


def _stderr_fd():
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stderr (tests): the real one
        return 2


def _stdout_fd():
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stdout (tests): the real one
        return 1


def _wait(
    proc: subprocess.Popen, warnings_: list, profiler: str = "nsys", on_interrupt=None, tree: JobTree | None = None
) -> int:
    """Wait for the profiled command (nsyscomm.capture.job_wait): its exit status, 130 when
    interrupted."""
    return job_wait.wait(proc, warnings_, profiler, on_interrupt, tree)


def _start_job(args: list[str], env: dict, mark: str, **kw) -> subprocess.Popen:
    """Start the job's first process, marked (nsyscomm.capture.job_tree), in a session of its own:
    a terminal's Ctrl-C reaches nsyscomm only, which forwards one SIGINT (job_wait)."""
    env[job_tree.MARK_ENV] = mark
    return subprocess.Popen(args, env=env, start_new_session=True, **kw)


@contextlib.contextmanager
def _owned(tree: JobTree, log: Path | None, drain: tuple[int, ...] = ()) -> Iterator[None]:
    """The job's processes are ended if this run ends before them (its own error, an interrupt
    that escapes the wait), and by a watchdog if nsyscomm is killed (drain: our ends of the job's
    stdout and stderr pipes, which the watchdog then reads)."""
    watchdog = job_tree.Watchdog(tree, str(log) if log else None, drain)
    try:
        yield
    except BaseException:
        job_tree.end(tree.processes)
        raise
    finally:
        watchdog.close()


def _temp_reports() -> set[Path]:
    """nsys's reports in its temporary folder. nsys writes there first and moves the report into
    the output folder; when it cannot (a full disk), the report stays there."""
    dirs = {Path(tempfile.gettempdir()), Path("/tmp")}
    if os.environ.get("TMPDIR"):
        dirs.add(Path(os.environ["TMPDIR"]))
    found = set()
    for d in dirs:
        for pat in ("nsys-report-*.qdstrm", "nsys-report-*.nsys-rep"):
            try:
                found |= {f for f in d.glob(pat) if f.is_file()}
            except OSError:
                pass
    return found


def _capture_files(out_dir: Path, temp_before: set[Path]) -> list[Path]:
    """The capture's files now: the output folder's and nsys's new temporary ones."""
    found = [f for pat in ("*.qdstrm", "*.nsys-rep") for f in out_dir.glob(pat)]
    return found + sorted(_temp_reports() - temp_before)


def _file_size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _has_room(out_dir: Path, files: list[Path]) -> bool:
    """The output folder has room for these files and takes writes: then it was not the cause."""
    try:
        free = shutil.disk_usage(out_dir).free
    except OSError:
        return False
    return free > sum(_file_size(f) for f in files) and os.access(out_dir, os.W_OK)


PROFILERS = ("nsys", "torch")


def _run_torch(cmd, out_dir: Path, steps_ab, per_rank, nsys_args, stdout_to_stderr, while_job_runs=None) -> RunResult:
    """--profiler torch: no nsys; the startup hook runs torch.profiler in every process that
    initializes a process group and writes DIR/rank<R>.json.gz (nsyscomm/capture/torch_profile.py)."""
    warnings_: list[str] = []
    if per_rank:
        warnings_.append("--per-rank is implied with --profiler torch (one trace per rank)")
    if nsys_args:
        warnings_.append("--nsys-args ignored with --profiler torch")
    env = job_env(steps_ab)
    env.pop("NSYS_NVTX_PROFILER_REGISTER_ONLY", None)
    env["NSYSCOMM_PROFILER"] = "torch"
    env["NSYSCOMM_TRACE_DIR"] = str(out_dir)
    if shutil.which(cmd[0], path=env.get("PATH")) is None and not os.path.exists(cmd[0]):
        raise InputError(f"command not found: {cmd[0]} (give the full path or fix PATH)")
    before = {f: f.stat().st_mtime_ns for f in out_dir.glob("rank*.json.gz")}
    mark = job_tree.new_mark()
    try:
        proc = _start_job(cmd, env, mark, stdout=_stderr_fd() if stdout_to_stderr else None)
    except OSError as e:
        raise InputError(f"cannot start {cmd[0]} ({e.strerror}): check the command and PATH") from None
    beside = Beside(while_job_runs)
    tree = JobTree(mark, proc.pid)
    with _owned(tree, out_dir / run_folder.LOG_NAME):
        rc = _wait(proc, warnings_, profiler="torch", tree=tree)
    beside.join()
    if rc != 0 and not _interrupted(warnings_):
        warnings_.append(f"the command exited with status {rc}: the traces cover the run until then")
    reports = sorted(
        (f for f in out_dir.glob("rank*.json.gz") if before.get(f) != f.stat().st_mtime_ns),
        key=lambda f: (len(f.name), f.name),
    )
    stood_down = program_profile.read_notes(str(out_dir))
    if stood_down:
        ranks = ", ".join(str(r) for r, _ in stood_down)
        windows = sum(n for _, n in stood_down)
        warnings_.append(
            f"the program ran its own torch.profiler (rank(s) {ranks}): nsyscomm's stood down there, "
            f"and those traces hold what the program's recorded ({windows} window(s) in all)"
        )
    if not reports:
        warnings_.append(
            f"no torch.profiler trace was written in {out_dir} (no process initialized a "
            f"torch.distributed process group{', or the --steps window was never reached' if steps_ab else ''})"
        )
    return RunResult(exit_code=rc, output_dir=out_dir, reports=reports, warnings=warnings_, command=list(cmd))


def run(
    cmd: list[str],
    output: str | None = None,
    steps: str | None = None,
    per_rank: bool = False,
    nsys_args: str | None = None,
    stdout_to_stderr: bool = False,
    profiler: str = "nsys",
    hang_timeout: str | float | None = None,
    export: str = DEFAULT_EXPORT,
    preset: str = "default",
    while_job_runs: Callable[[], object] | None = None,
) -> RunResult:
    """while_job_runs: called in a thread as the job starts (nice_this_thread lowers its priority),
    and waited for before this returns, after the import and export: what the caller's next step
    can do before the report exists (the summary's imports). stdout_to_stderr: send nsys's and the command's output to stderr, keeping stdout for a
    machine-readable summary (``nsyscomm run --format json > summary.json``).
    profiler: "nsys" (default) or "torch" (torch.profiler in each process, one Kineto trace per rank).
    hang_timeout: seconds or "90s"/"5m": end a job hung in a collective (nsyscomm.capture.hang_watch),
    exit status 124. export: the format nsys exports each report to ("sqlite", "arrow");
    preset: what nsys traces (PRESETS)."""
    if not cmd:
        raise InputError("no command to run: nsyscomm run [OPTIONS] -- CMD ...")
    cmd = list(cmd)
    if cmd[0] == "--":
        cmd = cmd[1:]
    if profiler not in PROFILERS:
        raise InputError(f"unknown profiler {profiler!r}: use one of {', '.join(PROFILERS)}")
    if profiler == "torch":
        steps_ab = _parse_steps(steps) if steps else None
        out_dir = _check_output(output)
        with run_folder.claimed(out_dir):
            return _run_torch(cmd, out_dir, steps_ab, per_rank, nsys_args, stdout_to_stderr, while_job_runs)
    nsys, _ver = find_nsys()
    steps_ab = _parse_steps(steps) if steps else None
    out_dir = _check_output(output)
    if export not in EXPORTS:
        raise InputError(f"unknown export {export!r}: use one of {', '.join(EXPORTS)}")
    trace = trace_for(preset, has_gpu())
    options = preset_options(preset)
    env = job_env(steps_ab)
    if shutil.which(cmd[0], path=env.get("PATH")) is None and not os.path.exists(cmd[0]):
        raise InputError(f"command not found: {cmd[0]} (give the full path or fix PATH)")
    from nsyscomm.capture import hang_watch

    hang_s = hang_watch.parse_duration(hang_timeout) if hang_timeout not in (None, "") else None
    warnings_: list[str] = []
    split = torchrun_split(cmd) if per_rank else None
    if per_rank and split is None:
        warnings_.append("--per-rank applies to torchrun commands; one report for the whole process tree")
    if split is not None:
        launcher_part, module, script = split
        prof = nsys_profile_args(nsys, str(out_dir / "report.rank%q{RANK}"), steps_ab, nsys_args, trace, options)
        full = launcher_part + ["--no-python"] + prof + [sys.executable, "-u"] + (["-m"] if module else []) + script
    else:
        full = nsys_profile_args(nsys, str(out_dir / "report"), steps_ab, nsys_args, trace, options) + cmd
    with run_folder.claimed(out_dir):
        return _run_nsys(
            full, out_dir, nsys, env, trace, hang_s, export, preset, stdout_to_stderr, warnings_, while_job_runs
        )


def _run_nsys(
    full: list[str],
    out_dir: Path,
    nsys: str,
    env: dict,
    trace: str,
    hang_s: float | None,
    export: str,
    preset: str,
    stdout_to_stderr: bool,
    warnings_: list[str],
    while_job_runs: Callable[[], object] | None = None,
) -> RunResult:
    """The job under nsys (the command line `full`), then the import and export of its capture,
    in a folder this run holds."""
    from nsyscomm.capture import flight_record

    records = run_folder.private_dir(out_dir / run_folder.RECORDS_DIR)
    env[flight_record.ENV_DIR] = str(records)
    _write_command(out_dir, full)
    temp_before = _temp_reports()
    mark = job_tree.new_mark()
    proc, err = _start_under_nsys(full, env, mark, stdout_to_stderr)
    tree = JobTree(mark, proc.pid, tool_dir=os.path.dirname(os.path.dirname(os.path.realpath(nsys))))
    beside = Beside(while_job_runs)
    started = time.perf_counter()
    with _owned(tree, out_dir / run_folder.LOG_NAME, err.read_fds):
        rc = _watch_job(
            proc, err, records, hang_s, lambda: _capture_files(out_dir, temp_before), preset, warnings_, tree
        )
    if full[0] == nsys and rc != 0 and not _capture_files(out_dir, temp_before) and not _interrupted(warnings_):
        raise _nsys_failed(out_dir, rc, err.last_line)
    log = StageLog(out_dir)  # each stage after the job shown and logged
    job_end = time.perf_counter()
    log.line(f"job exited with status {rc} after {job_end - started:.2f} s (nsys profile --trace={trace})")
    try:
        with log:
            reports = import_and_export(out_dir, nsys, warnings_, export=export, log=log, base="report")
    except OSError as e:
        warnings_.append(
            f"cannot import/export the report in {out_dir} ({e.strerror or e}): "
            f"free space there, then run: nsys export --type sqlite REPORT.nsys-rep"
        )
        reports = []
    if not reports:
        warnings_.append(_no_report(out_dir, temp_before, rc, preset))
    beside.join()
    line = beside.summary(job_end)
    if line:
        log.line(line, echo=False)
    return RunResult(exit_code=rc, output_dir=out_dir, reports=reports, warnings=warnings_, command=full)


def _write_command(out_dir: Path, full: list[str]) -> None:
    """The command line that runs, kept in the run folder (the first write into it)."""
    try:
        (out_dir / run_folder.COMMAND_NAME).write_text(
            " ".join(shlex.quote(c) for c in full) + "\n", encoding="utf-8", errors="surrogateescape"
        )
    except OSError as e:
        raise InputError(
            f"cannot write into the output folder {out_dir} ({e.strerror}): "
            f"free space there or pass --output with another folder"
        ) from None


def _start_under_nsys(
    full: list[str], env: dict, mark: str, stdout_to_stderr: bool
) -> tuple[subprocess.Popen, FilteredOutput]:
    """Start the command line, its stdout and stderr through filters that drop nsys's lines that
    ask nothing of the user (its importer's, the .qdstrm it names)."""
    err = FilteredOutput(_stderr_fd() if stdout_to_stderr else _stdout_fd(), _stderr_fd())
    try:
        proc = _start_job(full, env, mark, stdout=err.child_out, stderr=err.child_fd)
    except OSError as e:
        err.abandon()
        raise InputError(f"cannot start {full[0]} ({e.strerror}): check the command and PATH") from None
    err.start()
    return proc, err


def _watch_job(
    proc: subprocess.Popen,
    err: FilteredOutput,
    records: Path,
    hang_s: float | None,
    capture_files: Callable[[], list[Path]],
    preset: str,
    warnings_: list[str],
    tree: JobTree | None = None,
) -> int:
    """Wait for the job with its watchers (a hang ends it, a huge capture is warned of); its exit
    status, and warnings that say why it ended when it did not end well."""
    from nsyscomm.capture import flight_record, hang_watch

    watcher = hang_watch.Watcher(records, hang_s).start() if hang_s else None
    growth = CaptureWatch(capture_files, preset).start()
    try:
        rc = _wait(
            proc,
            warnings_,
            on_interrupt=lambda: flight_record.mark_stopped(records, "interrupted (Ctrl-C)"),
            tree=tree,
        )
    finally:
        growth.stop()
        err.close()
        if watcher is not None:
            watcher.stop()
    if growth.warning:
        warnings_.append(growth.warning)
    if watcher is not None and watcher.fired and hang_s is not None:  # the job hung and was stopped
        warnings_.append(
            f"the job hung: no collective finished for {hang_s:g} s; its ranks were stopped "
            f"(exit status {hang_watch.EXIT_HUNG})"
        )
        return hang_watch.EXIT_HUNG
    if rc != 0 and not _interrupted(warnings_):
        warnings_.append(f"the command exited with status {rc}: the report covers the run until then")
        note = flight_record.teardown_note(flight_record.read_dir(records)) if records.is_dir() else None
        if note:
            warnings_.append(note)
    return rc


def _interrupted(warnings_: list[str]) -> bool:
    return any(w.startswith("interrupted") for w in warnings_)


# what nsys says when it cannot start the program, and what to do about it
_NSYS_FIXES = {
    "Not executable": "make the program executable (chmod +x) or run it through its interpreter",
    "Agent launcher failed": "nsys needs a writable temporary folder: point TMPDIR to one",
}


def _nsys_failed(out_dir: Path, rc: int, said: str) -> InputError:
    """nsys ended without a capture: it did not run the program. Its own line and a fix, and the
    folder left as it was found (nothing of this run in it), so that it can be used again."""
    for name in (run_folder.COMMAND_NAME, run_folder.LOG_NAME):
        with contextlib.suppress(OSError):
            (out_dir / name).unlink()
    with contextlib.suppress(OSError):
        (out_dir / run_folder.RECORDS_DIR).rmdir()  # empty: no rank ever started
    fix = next((f for k, f in _NSYS_FIXES.items() if k in said), "see nsys's output above")
    quoted = f": {said}" if said else ""
    return InputError(
        f"nsys could not run the command (it exited with status {rc} before the command started{quoted}); {fix}"
    )


def _no_report(out_dir: Path, temp_before: set[Path], rc: int, preset: str) -> str:
    """Why no report was written, and what to do with the capture nsys left elsewhere, if any."""
    time.sleep(0.5)  # a concurrent nsys's temporary file is moved away by then
    stray = sorted(_temp_reports() - temp_before)
    if stray and _has_room(out_dir, stray):
        return (
            f"nsys stopped before it finished the report and left its capture at "
            f"{', '.join(map(str, stray))} ({size_text(sum(_file_size(f) for f in stray))}; "
            f"the job exited with status {rc}): import and export it with QdstrmImporter -i FILE.qdstrm "
            f"and nsys export --type sqlite --include-blobs=true FILE.nsys-rep, then run nsyscomm "
            f"summarize on the export; {advice(preset)}"
        )
    if stray:
        return (
            f"nsys could not write into {out_dir} (full or not writable?) and left the report "
            f"at {', '.join(map(str, stray))}: move it somewhere with space, then import/export it "
            f"(QdstrmImporter -i FILE.qdstrm; nsys export --type sqlite FILE.nsys-rep) and run "
            f"nsyscomm summarize on the .sqlite"
        )
    return f"no report was written in {out_dir} (see nsys's output above)"
