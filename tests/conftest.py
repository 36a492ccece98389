from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from nsyscomm.ingest.nsys.reader import read_only_uri

# The suite's paths, for a test in any folder under tests/: the project, the tests' own job
# scripts (data) and expected outputs (golden).
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
GOLDEN = TESTS / "golden"
# Real exports live beside the project (never copied into it): ../shared/real
REAL = ROOT.parent / "shared" / "real"
REAL_NSYS = REAL / "nsys"
SAMPLES = ROOT / "sample_reports"


def real_file(relpath: str) -> Path:
    p = REAL / relpath
    if not p.exists():
        pytest.skip(f"real data {relpath} not present (../shared/real is only beside the project checkout)")
    return p


# Every real nsys export the suite reads (../shared/real/nsys; MANIFEST.md there). The list is
# written out, never globbed, so that a checkout without ../shared collects the same tests and
# skips each one that needs a missing file, naming it (pytest_collection_modifyitems below);
# test_real_data_list_is_complete fails when a file is added there and not here.
REAL_NSYS_NAMES = (
    "nsys2022.1_1gpu_schema2.9.sqlite",
    "nsys2023.3_no_cuda_no_nvtx.sqlite",
    "nsys2025.1_1gpu_nvtx.sqlite",
    "nsys2025.3_1xH100_nccl2.28_run_light.sqlite",
    "nsys2026.1_tiny.sqlite",
    "nsys2026.2_2xH100_nccl_window.sqlite",
    "nsys2026.2_2xH100_nonccl_window.sqlite",
)


def real_nsys_files() -> list[Path]:
    """The real nsys exports, present or not (a test given a missing one is skipped)."""
    return [REAL_NSYS / name for name in REAL_NSYS_NAMES]


def _missing_real(value) -> Path | None:
    if isinstance(value, Path) and not value.exists() and value.is_relative_to(REAL):
        return value
    return None


def pytest_configure(config):
    """Ctrl-C tests send SIGINT to the processes they start. A suite started in the background by
    a shell without job control (`cmd &`, nohup) inherits SIGINT ignored, and so would every job it
    starts: the signal would do nothing and those tests would wait for it to their time limit.
    The suite takes Python's own handler back, so its children start with the default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    """A test parametrized with a real file that is absent is skipped with the file's name: the
    test list is the same with and without ../shared."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        missing = next((m for m in map(_missing_real, params.values()) if m is not None), None)
        if missing is not None:
            rel = missing.relative_to(REAL)
            item.add_marker(
                pytest.mark.skip(reason=f"real data {rel} not present (../shared/real is beside the checkout)")
            )


# what `nsyscomm run` says when the flight records show every rank's program ran to its end and
# the job failed after that (nsyscomm.capture.flight_record.teardown_note)
TEARDOWN = "the job failed in its teardown, after its work"


# a job under test writes done.<rank> here once its work is done (tests/data/*_job.py)
DONE_ENV = "NSYSCOMM_TEST_DONE_DIR"


def job_did_its_work(exit_code: int, messages, ranks_done: int, world: int) -> bool:
    """A profiled job under `nsyscomm run` did its work: every one of its `world` ranks recorded
    the end of its work itself (ranks_done, from files the program wrote: done_ranks()), and it
    exited 0 or nsyscomm found from the flight records that it failed only in its teardown.
    torch's gloo aborts a rank there now and then, profiled or not, even after a barrier
    (docs/capture.md, "A job that fails in its teardown"); the report is complete then, and what
    the test asserts of it still holds. nsyscomm's note alone is not enough: a note printed for a
    job that failed in its work would pass every failure."""
    text = messages if isinstance(messages, str) else "\n".join(messages)
    return ranks_done == world and (exit_code == 0 or TEARDOWN in text)


def aborted_in_teardown(torchrun_stderr: str) -> bool:
    """A bare torchrun job (no `nsyscomm run` to read its flight records) that failed because
    torch aborted a rank as its process exited: std::terminate's line and torchrun's SIGABRT.
    Only with the ranks' own marks that their work was done (done files written after their last
    collective): torch's gloo does that now and then, profiled or not, with no Python frame left
    (docs/capture.md, "A job that fails in its teardown"), most often on a busy machine."""
    return "terminate called without an active exception" in torchrun_stderr and "(SIGABRT)" in torchrun_stderr


def done_ranks(done_dir: Path, pattern: str = "done.*") -> int:
    """How many ranks wrote their done file (DONE_ENV) in done_dir."""
    return len(list(Path(done_dir).glob(pattern)))


def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(read_only_uri(path), uri=True)


def job_inputs() -> list:
    """pytest params for every job we can test a view on: the real H100 window and each sample job."""
    out = []
    out.append(pytest.param(REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite", id="real-h100-window"))
    if SAMPLES.exists():
        for p in sorted(SAMPLES.iterdir()):
            if p.suffix == ".sqlite" or (p.is_dir() and any(p.glob("*.sqlite"))):
                out.append(pytest.param(p, id=p.stem))
    return out or [pytest.param(None, marks=pytest.mark.skip(reason="no real file and no sample reports"))]


_LOADED: dict = {}


def loaded(path: Path):
    """nsyscomm.load, once per path per test session (the views only read the Result)."""
    from nsyscomm.api import load

    if path not in _LOADED:
        _LOADED[path] = load([path])
    return _LOADED[path]


def sample(name: str) -> Path:
    p = SAMPLES / name
    if not p.exists():
        pytest.skip(f"sample {name} not generated")
    return p


def single_rank_gloo():
    """A world of one gloo rank in this process (file store, no network): yields the world group."""
    import os
    import tempfile

    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        from nsyscomm.capture import wrapper as W

        W.annotate(False)
        dist.destroy_process_group()


@pytest.fixture
def h100_window() -> Path:
    return real_file("nsys/nsys2026.2_2xH100_nccl_window.sqlite")


# what `nsyscomm run` says when nsys itself wrote no report (nsyscomm/capture/launcher.py)
NSYS_WROTE_NO_REPORT = "no report was written in"


@dataclass
class JobRun:
    """One profiled run of a command: what it printed and its exit status (as subprocess.run's
    result names them), the output folder of the attempt kept and that attempt's own wall time."""

    returncode: int
    stdout: str
    stderr: str
    out: Path | None
    seconds: float


def torchrun_cmd(script: Path, *args, ranks: int = 2) -> list[str]:
    """torchrun of a job script on `ranks` local processes of this machine."""
    return ["torchrun", "--standalone", "--nproc-per-node", str(ranks), str(script), *map(str, args)]


def run_job_cmd(out: Path, script: Path, *args, ranks: int = 2, options=()) -> list[str]:
    """`nsyscomm run -o OUT OPTIONS -- torchrun ... SCRIPT ARGS`, run by this Python."""
    run = [sys.executable, "-m", "nsyscomm.cli", "run", "-o", str(out), *map(str, options), "--"]
    return run + torchrun_cmd(script, *args, ranks=ranks)


def run_job(
    out: Path, script: Path, *args, ranks: int = 2, options=(), again_on=(NSYS_WROTE_NO_REPORT,), **kw
) -> JobRun:
    """A job script run by `nsyscomm run -o OUT OPTIONS -- torchrun` on `ranks` processes, its
    output captured as text (run_profiled: once more when nsys itself wrote no report). Keywords
    go to subprocess.run; the timeout is 600 s unless given."""
    kw.setdefault("timeout", 600)
    cmd = run_job_cmd(out, script, *args, ranks=ranks, options=options)
    return run_profiled(cmd, again_on=again_on, capture_output=True, text=True, **kw)


def _output_folder(cmd: list[str]) -> int | None:
    """The index of the output folder's argument in an `nsyscomm run` command line (the job's own
    arguments, after `--`, are not looked at)."""
    own = cmd[: cmd.index("--")] if "--" in cmd else cmd
    for flag in ("-o", "--output"):
        if flag in own:
            return own.index(flag) + 1
    return None


def run_profiled(cmd: list, again_on=(NSYS_WROTE_NO_REPORT,), **kw) -> JobRun:
    """subprocess.run of an `nsyscomm run -o OUT ...` command line, run once more (into OUT-again)
    when its error output holds one of `again_on`: by default, when nsys itself wrote no report.
    Debian's nsys 2022.4 now and then fails its own start or its report on a loaded machine
    ("Local Endpoint is not available", "End of file", sem_open, boost::filesystem), profiled job
    or not; nsyscomm reports that, and what a test asserts is about the report of a run nsys
    completed. Any other failure is returned as is. Each attempt is timed alone."""
    cmd = [str(a) for a in cmd]
    at = _output_folder(cmd)
    for attempt in range(2):
        if attempt and at is not None:
            cmd[at] += "-again"
        t0 = time.monotonic()
        r = subprocess.run(cmd, **kw)
        took = time.monotonic() - t0
        if not any(s in (r.stderr or "") for s in again_on):
            break
    return JobRun(r.returncode, r.stdout, r.stderr, Path(cmd[at]) if at is not None else None, took)
