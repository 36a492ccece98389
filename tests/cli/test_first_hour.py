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


def test_the_readme_installs_the_torch_ci_tests():
    """The Quick start's torch line names the version CI pins, from pip's own index (no index a
    machine may not reach); pyproject's [torch] extra says what it asks for."""
    import re

    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    text = (ROOT / "pyproject.toml").read_text()
    dev = text.split("\ndev = [", 1)[1].split("]", 1)[0]
    ci = re.search(r'"(torch==[0-9.]+)"', dev).group(1)  # type: ignore[union-attr]
    lines = [ln.strip() for ln in quick.splitlines() if ln.strip().startswith("pip install torch")]
    assert lines == [f"pip install {ci}"], lines
    assert "--index-url" not in quick
    comment = text.split("torch = [", 1)[0].rsplit("[project.optional-dependencies]", 1)[1]
    assert re.search(r'torch = \["torch>=2\.4"', text)
    assert "pinned to the CPU build" not in comment and "2.4" in comment and ci.split("==")[1] in comment


def test_the_quick_start_and_ci_example_run_the_bundled_example():
    """Every nsyscomm run of the README that is run as written profiles examples/train.py, a file
    of this checkout (tests/cli/test_readme.py runs them under the real nsys)."""
    from tests.conftest import ROOT

    rb = sys.modules.get("readme_blocks")
    if rb is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "scripts" / "readme_blocks.py")
        assert spec is not None and spec.loader is not None
        rb = importlib.util.module_from_spec(spec)
        sys.modules["readme_blocks"] = rb
        spec.loader.exec_module(rb)
    runs = [c for c in rb.scan()[0] if c.doc == "README.md" and c.text.startswith("nsyscomm run ") and not c.skip]
    assert len(runs) == 2  # the Quick start's and the CI example's
    assert all("torchrun --standalone --nproc-per-node=2 examples/train.py --steps 20 --seed 0" in c.text for c in runs)
    assert (ROOT / "examples" / "train.py").is_file()


def test_baseline_makes_the_folder_of_its_output(tmp_path, monkeypatch):
    """`nsyscomm baseline --output ci/comm-baseline.json RUN` in a fresh checkout, as the README says."""
    from nsyscomm.commands.gate import baseline

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(baseline, ["--output", "ci/comm-baseline.json", str(sample("synthetic_ddp_4rank.sqlite"))])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "ci" / "comm-baseline.json").read_text())["kind"] == "baseline"
