"""What a new user sees in the first hour. nsys's importer lines are not
shown, piped output never breaks a line nor ends one with spaces, and `export` needs no --format.
The real `nsyscomm run` of these points is in tests/cli/test_readme.py (the README's CI example)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nsyscomm.capture.nsys_output import DROPPED, FilteredStderr, LineFilter
from nsyscomm.cli import main
from tests.conftest import REAL_NSYS, sample

# what nsys 2022.4 prints on stderr after every run (Debian's package, whose importer it cannot find)
NSYS_TAIL = (
    b"Importer error status: The importer binary and its dependencies were not found.\n"
    b"Unable to retrieve the importer version: skipping importation of the QDSTRM file.\n"
)


def _through(chunks: list[bytes]) -> bytes:
    f = LineFilter()
    return b"".join(f.feed(c) for c in chunks) + f.flush()


def test_the_importer_lines_are_dropped_and_everything_else_kept():
    job = b"rank 0: step 1 loss 0.5\n\x1b[31mred\x1b[0m\r\nno newline at the end"
    assert _through([b"before\n", NSYS_TAIL, job]) == b"before\n" + job


@pytest.mark.parametrize("size", [1, 3, 17, 64])
def test_the_filter_does_not_depend_on_how_the_bytes_arrive(size):
    data = b"a progress bar\r 10%\r 20%\n" + NSYS_TAIL + b"Importer error status: something else\nlast"
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert _through(chunks) == b"a progress bar\r 10%\r 20%\nImporter error status: something else\nlast"


# what nsys 2022.4 prints on stdout about the .qdstrm that nsyscomm imports and removes
NSYS_GENERATED = b"Generating '/tmp/nsys-report-8e13.qdstrm'\nGenerated:\n    /tmp/fh/run1/report.qdstrm\n"


@pytest.mark.parametrize("size", [1, 5, 64])
def test_the_qdstrm_lines_are_dropped(size):
    data = b"step 1\n" + NSYS_GENERATED + b"Generated:\n    /tmp/run/report.nsys-rep\nGenerated: 3 files\nend"
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    # a report that exists afterwards, and a job's own "Generated:" line, are kept
    assert _through(chunks) == b"step 1\nGenerated:\n    /tmp/run/report.nsys-rep\nGenerated: 3 files\nend"
    assert _through([b"Generated:\n"]) == b"Generated:\n"  # the stream ended: shown after all


def test_a_partial_line_is_shown_at_once_unless_it_may_be_dropped():
    f = LineFilter()
    assert f.feed(b"Epoch 1 [=====") == b"Epoch 1 [====="  # a progress bar is not held back
    assert f.feed(b"===]\n") == b"===]\n"
    assert f.feed(DROPPED[0][:10]) == b""  # may still become the importer's line
    assert f.feed(b"\n") == DROPPED[0][:10] + b"\n"  # it did not


def test_filtered_stderr_of_a_process(tmp_path):
    """A child's stderr through FilteredStderr, as `nsyscomm run` starts nsys: a pipe when
    nsyscomm's stderr is not a terminal."""
    out = tmp_path / "err.txt"
    script = "import sys; sys.stderr.buffer.write(sys.stdin.buffer.read()); sys.stderr.flush()"
    with open(out, "wb") as sink:
        err = FilteredStderr(sink.fileno())
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stderr=err.child_fd)
        err.start()
        proc.communicate(b"job line\n" + NSYS_TAIL + b"after\n")
        err.close()
    assert out.read_bytes() == b"job line\nafter\n"


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_a_terminal_stays_a_terminal_for_the_job(tmp_path):
    """With nsyscomm's stderr on a terminal, the job's stderr is one too (colours, progress bars)."""
    master, slave = os.openpty()
    try:
        err = FilteredStderr(slave)
        script = "import os, sys; sys.stderr.write(f'isatty={os.isatty(2)}\\n'); sys.stderr.flush()"
        proc = subprocess.Popen([sys.executable, "-c", script], stderr=err.child_fd)
        err.start()
        proc.wait()
        err.close()
        assert os.read(master, 1024).replace(b"\r\n", b"\n") == b"isatty=True\n"
    finally:
        os.close(master)
        os.close(slave)


def test_piped_text_keeps_a_long_line_whole_without_trailing_spaces():
    """A line longer than the 200 columns of piped output (a suggested command) stays one line,
    and no table row ends with the spaces rich pads it with."""
    from nsyscomm.commands import console

    long = "export again with nsys export --type sqlite --include-blobs=true " + "x" * 300 + " REPORT.nsys-rep"

    @__import__("click").command()
    def show() -> None:
        from rich.table import Table

        c = console()
        t = Table(title="t")
        t.add_column("a")
        t.add_column("b")
        t.add_row("1", "a value much longer than its header")
        c.print(t)
        c.print(long)

    res = CliRunner().invoke(show, [])
    lines = res.output.splitlines()
    assert long in lines
    assert [ln for ln in lines if ln != ln.rstrip()] == []


@pytest.mark.skipif(not (REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite").exists(), reason="shared/real is absent")
def test_the_suggested_export_command_is_one_line():
    res = CliRunner().invoke(main, ["summarize", "--no-cache", str(REAL_NSYS / "nsys2026.2_2xH100_nccl_window.sqlite")])
    assert res.exit_code == 0, res.output
    cmd = "export again with nsys export --type sqlite --include-blobs=true --include-json=true REPORT.nsys-rep"
    assert any(cmd in line for line in res.output.splitlines()), res.output[-2000:]
    assert all(line == line.rstrip() for line in res.output.splitlines())


def test_export_needs_no_format(tmp_path):
    """`whatif` is export's only format: the default, not a required option."""
    res = CliRunner().invoke(main, ["export", str(tmp_path / "out"), str(sample("synthetic_ddp_4rank.sqlite"))])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["meta-nsyscomm.yaml", "trace-nsyscomm.parquet"]


def test_export_alone_writes_the_samples_job_to_a_default_folder(tmp_path, monkeypatch):
    """`nsyscomm export` with no argument, as the README says of commands without inputs: the first
    bundled sample's job, into whatif-trace/, the same trace as naming both."""
    import pandas as pd

    from nsyscomm.discover import sample_jobs

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["export"])
    assert res.exit_code == 0, res.output
    got = tmp_path / "whatif-trace"
    assert sorted(p.name for p in got.iterdir()) == ["meta-nsyscomm.yaml", "trace-nsyscomm.parquet"]
    res = CliRunner().invoke(main, ["export", "named", str(sample_jobs()[0])])
    assert res.exit_code == 0, res.output
    named = tmp_path / "named"
    pd.testing.assert_frame_equal(
        pd.read_parquet(got / "trace-nsyscomm.parquet"), pd.read_parquet(named / "trace-nsyscomm.parquet")
    )
    assert (got / "meta-nsyscomm.yaml").read_text() == (named / "meta-nsyscomm.yaml").read_text()


def test_baseline_makes_the_folder_of_its_output(tmp_path, monkeypatch):
    """`nsyscomm baseline --output ci/comm-baseline.json RUN` in a fresh checkout, as the README says."""
    from nsyscomm.commands.gate import baseline

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(baseline, ["--output", "ci/comm-baseline.json", str(sample("synthetic_ddp_4rank.sqlite"))])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "ci" / "comm-baseline.json").read_text())["kind"] == "baseline"
