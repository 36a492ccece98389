"""The wait after the job of `nsyscomm run`: what the summary needs before the report exists (its
imports; for per-rank reports, the extraction pool's fork server) is done while the job runs, in a
thread beside it (docs/performance.md, "The wait after the job"). The figures are the benchmark's
(benchmarks/bench_capture.py --variants nsys,run-arrow,run-base); these tests hold the mechanism."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from tests.capture.test_run_folder import fake_nsys  # noqa: F401 - the stand-in nsys fixture
from tests.conftest import ROOT

JOB_WAITS_FOR_GO = textwrap.dedent(
    """\
    import os, sys, time
    deadline = time.time() + 120  # bounded: the test fails on the flag below, not by hanging
    while not os.path.exists(sys.argv[1]) and time.time() < deadline:
        time.sleep(0.05)
    sys.exit(0 if os.path.exists(sys.argv[1]) else 5)
    """
)


def test_the_work_beside_the_job_runs_while_the_job_runs(fake_nsys, tmp_path):  # noqa: F811
    """The job ends only once the function beside it has run: it ran during the job, and the
    launcher returned after it."""
    from nsyscomm.capture.launcher import run

    job, go = tmp_path / "job.py", tmp_path / "go"
    job.write_text(JOB_WAITS_FOR_GO)
    seen = {}

    def beside():
        seen["thread"] = threading.current_thread().name
        go.touch()

    res = run([sys.executable, str(job), str(go)], output=str(tmp_path / "out"), while_job_runs=beside)
    assert res.exit_code == 0, res.warnings
    assert seen["thread"] != threading.main_thread().name
    assert [p.name for p in res.reports] == ["report.arrow"]  # the default export
    log = (res.output_dir / "nsyscomm-run.log").read_text()
    assert "beside the job: done" in log and log.rstrip().endswith(", ok"), log


def test_a_failing_head_start_changes_nothing(fake_nsys, tmp_path):  # noqa: F811
    from nsyscomm.capture.launcher import run

    def beside():
        raise RuntimeError("no head start")

    res = run([sys.executable, "-c", "pass"], output=str(tmp_path / "out"), while_job_runs=beside)
    assert res.exit_code == 0 and len(res.reports) == 1 and not res.warnings, res.warnings
    assert "failed (RuntimeError: no head start)" in (res.output_dir / "nsyscomm-run.log").read_text()


def test_nice_this_thread_lowers_the_calling_thread_alone():
    from nsyscomm.capture.launcher import BESIDE_NICE, nice_this_thread

    main_before = os.getpriority(os.PRIO_PROCESS, 0)
    got = {}

    def worker():
        nice_this_thread()
        got["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got["nice"] == max(main_before, BESIDE_NICE)
    assert os.getpriority(os.PRIO_PROCESS, 0) == main_before


def test_after_the_head_start_a_summary_imports_nothing_of_its_own():
    """import_summary_stack covers every module of nsyscomm's and of pyarrow's and rich's that
    reading a report and printing its summary (text and JSON) imports: a module added outside the
    packages it walks would otherwise be imported after the job again."""
    code = textwrap.dedent(
        """\
        import contextlib, io, sys
        import nsyscomm.cli
        from nsyscomm.api import load
        from nsyscomm.commands import import_summary_stack
        from nsyscomm.commands.summarize import emit  # as `nsyscomm run` has it
        from tests.conftest import SAMPLES
        import_summary_stack()
        before = set(sys.modules)
        r = load([SAMPLES / "synthetic_ddp_4rank.sqlite"], cache=False)
        for fmt in ("text", "json"):
            with contextlib.redirect_stdout(io.StringIO()):
                emit(r, fmt, "GBps", False)
        print("\\n".join(sorted(set(sys.modules) - before)))
        """
    )
    root = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, timeout=300
    ).stdout.split()
    late = [m for m in out if m.split(".")[0] in ("nsyscomm", "pyarrow", "rich", "duckdb")]
    assert late == [], late
