"""The CLI, driven through click's CliRunner: formats, the JSON contract, bad input."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import SAMPLES

DDP = str(SAMPLES / "synthetic_ddp_4rank.sqlite")


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_no_argument_tours_the_bundled_samples():
    r = run("summarize")
    assert r.exit_code == 0, r.output
    for name in (
        "synthetic_ddp_4rank.sqlite",
        "synthetic_fsdp_8rank.sqlite",
        "synthetic_gloo_cpu.sqlite",
        "synthetic_nowrapper_2node",
    ):
        assert f"sample job: {name}" in r.output
    assert "Comm. Op" in r.output and "busbw_avg (GB/s)" in r.output


def test_text_layout_is_deepspeeds():
    out = run("summarize", DDP).output
    header = next(line for line in out.splitlines() if "Comm. Op" in line)
    cols = [
        "Comm. Op",
        "Message Size",
        "Count",
        "Total Latency(ms)",
        "Avg Latency(ms)",
        "tput_avg (GB/s)",
        "busbw_avg (GB/s)",
    ]
    assert [header.index(c) for c in cols] == sorted(header.index(c) for c in cols)
    assert "25.0 MB" in out and "10.3125 MB" in out
    assert "minimum communication time =" in out and "for rank 2" in out
    assert "straggler: rank 2" in out


def test_by_caller_splits_ops_like_deepspeed_debug():
    out = run("summarize", DDP, "--by", "caller").output
    assert "all_reduce | [Caller Func: train.py:88 train_step]" in out
    assert "broadcast | [Caller Func: train.py:40 main]" in out


def test_units():
    """One unit, chosen once: GB/s by default in every format, as JSON has it;
    DeepSpeed's gigabits on request."""
    gbps = json.loads(run("summarize", DDP, "--format", "json").output)["summary"][0]["busbw_GBps"]
    for fmt in ("text", "markdown"):
        text = run("summarize", DDP, "--format", fmt).output
        assert "busbw_avg (GB/s)" in text and f"{gbps:.2f}" in text and f"{gbps * 8:.2f}" not in text
    text = run("summarize", DDP, "--units", "Gbps", "--format", "markdown").output
    assert "busbw_avg (Gbit/s)" in text and f"{gbps * 8:.2f}" in text


def test_json_contract():
    doc = json.loads(run("summarize", DDP, "--format", "json").output)
    assert doc["schema"] == 3
    for row in doc["summary"]:
        assert set(row) == {
            "op",
            "bytes",
            "count",
            "calls",
            "ranks",
            "total_ms",
            "avg_ms",
            "p50_ms",
            "min_ms",
            "max_ms",
            "algbw_GBps",
            "busbw_GBps",
            "group_size",
            "dtype",
            "caller",
            "queued_ms",
        }
    for row in doc["ranks"]:
        assert set(row) >= {"rank", "host", "calls", "comm_ms", "wait_ms", "elapsed_ms", "comm_pct"}
    assert set(doc["skew"]) == {"straggler_rank", "straggler_wait_caused_ms", "instances", "per_rank"}
    for row in doc["skew"]["per_rank"]:
        assert set(row) == {"rank", "late_count", "avg_arrival_delay_ms", "wait_ms", "caused_wait_ms"}
    assert isinstance(doc["warnings"], list)
    caller_doc = json.loads(run("summarize", DDP, "--format", "json", "--by", "caller").output)
    assert {r["caller"] for r in caller_doc["summary"]} == {"train.py:88 train_step", "train.py:40 main"}


def test_csv():
    """One CSV of every table, named in its first column (docs/views.md, "CSV")."""
    rows = list(csv.DictReader(io.StringIO(run("summarize", DDP, "--format", "csv").stdout)))
    summary = [r for r in rows if r["table"] == "summary"]
    assert len(summary) == 3
    assert {"op", "bytes", "count", "calls", "ranks", "total_ms", "busbw_GBps"} <= set(rows[0])


def _bad_inputs(tmp_path):
    (tmp_path / "empty.sqlite").write_bytes(b"")
    (tmp_path / "random.sqlite").write_bytes(bytes(range(256)) * 20)
    trunc = (SAMPLES / "synthetic_ddp_4rank.sqlite").read_bytes()[:30000]
    (tmp_path / "truncated.sqlite").write_bytes(trunc)
    con = sqlite3.connect(tmp_path / "other_app.sqlite")
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    (tmp_path / "no_reports").mkdir()
    (tmp_path / "trace.txt").write_text("hello")
    return [
        "empty.sqlite",
        "random.sqlite",
        "truncated.sqlite",
        "other_app.sqlite",
        "no_reports",
        "trace.txt",
        "missing.sqlite",
    ]


def test_bad_input_one_line_exit_2(tmp_path):
    for name in _bad_inputs(tmp_path):
        path = tmp_path / name
        before = path.read_bytes() if path.is_file() else None
        r = CliRunner().invoke(main, ["summarize", str(path)])
        assert r.exit_code == 2, (name, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and name in lines[0] and "Traceback" not in r.output, (name, r.output)
        if before is not None:
            assert path.read_bytes() == before, f"{name} was modified"
    # nothing was written beside the inputs (no journals, no caches)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["empty.sqlite", "random.sqlite", "truncated.sqlite", "other_app.sqlite", "no_reports", "trace.txt"]
    )


def test_nothing_written_beside_the_input(tmp_path):
    import shutil

    shutil.copy(DDP, tmp_path / "r.sqlite")
    assert run("summarize", str(tmp_path / "r.sqlite")).exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["r.sqlite"]


def test_debug_shows_traceback_for_bad_input(tmp_path):
    (tmp_path / "empty.sqlite").write_bytes(b"")
    r = CliRunner().invoke(main, ["summarize", str(tmp_path / "empty.sqlite"), "--debug"])
    assert r.exit_code == 2
    assert "Traceback" in r.output


@pytest.mark.parametrize("fmt", ["markdown", "text"])
def test_report_strings_are_escaped(tmp_path, fmt):
    """Callers come from the profiled program: markup in them must not be interpreted."""
    import shutil

    dst = tmp_path / "r.sqlite"
    shutil.copy(DDP, dst)
    con = sqlite3.connect(dst)
    con.execute(
        "UPDATE StringIds SET value = replace(value, 'caller=train.py:88 train_step', "
        "'caller=<script>x</script> [bold]|pipe') WHERE value LIKE 'nsyscomm:%'"
    )
    con.commit()
    con.close()
    out = run("summarize", str(dst), "--by", "caller", "--format", fmt).output
    if fmt == "markdown":
        assert "<script>" not in out and "&lt;script&gt;" in out and "\\|pipe" in out
    else:
        assert "[bold]|pipe" in out


def test_nccl_log_header_and_reference(tmp_path):
    from tests.conftest import real_file

    log = real_file("nccl-logs/aws-p5-h100-16rank-nccl-debug-info.log")
    r = run("summarize", DDP, "--nccl-log", str(log))
    assert r.exit_code == 0, r.output
    assert "NCCL 2.22.3 (CUDA 12.2) | 16 ranks on 2 nodes" in r.output
    assert "peak busbw 487.90 GB/s" in r.output
    doc = json.loads(run("summarize", DDP, "--nccl-log", str(log), "--format", "json").output)
    assert doc["nccl"]["logs"][0]["version"] == "2.22.3" and "hosts" not in doc["nccl"]["logs"][0]
    vs = doc["nccl"]["vs_reference"]
    assert {v["bytes"] for v in vs} == {10813440, 26214400}
    assert all(0 < v["busbw_vs_ref"] < 2 for v in vs)
    bad = run("summarize", DDP, "--nccl-log", str(tmp_path / "missing.log"))
    assert bad.exit_code == 2 and "missing.log" in bad.output


def test_the_command_exits_without_a_last_garbage_collection():
    """`nsyscomm` is nsyscomm.__main__.entry, which runs cli.entry: main(), then gc.freeze(), so
    that Python's collection at exit does not walk every object pandas and pyarrow made (0.08 s of
    each run)."""
    import subprocess
    import sys
    from importlib.metadata import entry_points

    assert entry_points(group="console_scripts")["nsyscomm"].value == "nsyscomm.__main__:entry"
    code = (
        "import gc, sys\nfrom nsyscomm.cli import entry\n"
        "try:\n    entry(['--version'])\nexcept SystemExit:\n    pass\n"
        "print(gc.get_freeze_count() > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "True"


def test_ctrl_c_during_the_imports_is_held_until_they_are_done():
    """summarize._interrupt_after: a Ctrl-C in the block is raised after it, never inside (an import cut
    by KeyboardInterrupt can leave Python's import lock held and hang the head start's reading)."""
    import os
    import signal

    from nsyscomm.commands.summarize import _interrupt_after

    before = signal.getsignal(signal.SIGINT)
    ran = []
    with pytest.raises(KeyboardInterrupt):
        with _interrupt_after():
            os.kill(os.getpid(), signal.SIGINT)
            ran.append("after the signal")
    assert ran == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is before
    with _interrupt_after():  # no signal: nothing raised
        ran.append("quiet")
    assert ran[-1] == "quiet"


def test_an_ignored_ctrl_c_stays_ignored():
    """A caller that ignores SIGINT (nohup, a batch system) is not overruled by the command's
    handlers: neither the start-up one (nsyscomm.__main__) nor the one held during the imports."""
    import os
    import signal
    import subprocess
    import sys

    from nsyscomm.commands.summarize import _interrupt_after

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _interrupt_after():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    code = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "from nsyscomm import __main__ as program, resources\n"
        "sys.argv[1:] = ['--version']\n"
        "resources.prepare = lambda: os.kill(os.getpid(), signal.SIGINT)\n"  # Ctrl-C during the start-up
        "program.entry()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (0, ""), out


def test_ctrl_c_that_duckdb_took_during_the_head_start_ends_the_summarize(monkeypatch):
    """DuckDB turns a Ctrl-C during its own work on the main thread into a RuntimeError ("Query
    interrupted"): the head start, which gives up quietly on any error of its own, must not take
    that one for a reason to read the report later instead; the summarize ends with one line."""
    from nsyscomm.ingest.nsys import reader

    def interrupted(path):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(reader, "head_start", interrupted)
    res = CliRunner().invoke(main, ["summarize", "--no-cache", str(SAMPLES / "synthetic_ddp_4rank.sqlite")])
    assert (res.exit_code, res.stderr.strip(), res.stdout) == (130, "nsyscomm: interrupted", "")


def test_ctrl_c_that_cut_an_extension_import_is_one_line_and_130(monkeypatch, capsys):
    """A KeyboardInterrupt inside a C extension's initialization reaches Python as "ImportError:
    initialization failed" (its cause the KeyboardInterrupt): while click loads a command, that is
    Ctrl-C too, not a traceback."""
    from nsyscomm import cli

    def cut(name):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e

    monkeypatch.setattr(cli.importlib, "import_module", cut)
    # an earlier test in the same process may have loaded the command already
    monkeypatch.delitem(cli.main.commands, "gate", raising=False)
    with pytest.raises(SystemExit) as e:
        cli.entry(["gate", "--help"])
    assert e.value.code == 130 and capsys.readouterr().err.strip() == "nsyscomm: interrupted"


def test_ctrl_c_while_click_dispatches_is_one_line_and_130(monkeypatch, capsys):
    """Before a command takes over (click parsing and dispatching, slow on a loaded machine),
    Ctrl-C ends the command as it does anywhere else, not with click's "Aborted!" and status 1;
    click's other errors keep their message and status."""
    import gc

    import click

    from nsyscomm import cli

    def interrupted(self, ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(click.Group, "invoke", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.entry(["summarize"])
    assert e.value.code == 130 and capsys.readouterr().err.strip() == "nsyscomm: interrupted"
    monkeypatch.undo()
    with pytest.raises(SystemExit) as e:
        cli.entry(["summarize", "--no-such-option"])
    assert e.value.code == 2 and "No such option" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.entry(["--version"])
    assert e.value.code == 0 and "nsyscomm, version" in capsys.readouterr().out
    gc.unfreeze()  # entry() froze this test process's objects, as it does the command's


def test_the_launcher_and_the_run_command_export_alike():
    """One default export format for nsyscomm.capture.launcher.run and `nsyscomm run --export`."""
    import inspect

    from nsyscomm.capture.launcher import run as launch
    from nsyscomm.commands.run import run as run_command

    option = next(p for p in run_command.params if p.name == "export")
    assert inspect.signature(launch).parameters["export"].default == option.default == "arrow"


def test_shared_options_read_alike_in_every_command():
    """--debug, --merge and the summary's --format are declared once (nsyscomm/commands/options.py):
    the same help wherever they appear."""
    import click

    from nsyscomm import cli

    ctx = click.Context(cli.main)
    helps: dict[str, set] = {}
    for name in cli.main.list_commands(ctx):
        command = cli.main.get_command(ctx, name)
        assert command is not None
        for p in command.params:
            if isinstance(p, click.Option) and p.name in ("debug", "merge"):
                helps.setdefault(p.name, set()).add(p.help)
    assert len(helps["debug"]) == 1 and len(helps["merge"]) == 1, helps
    formats = {
        name: next(p for p in cli.main.get_command(ctx, name).params if p.name == "fmt")
        for name in ("summarize", "run")
    }
    assert formats["summarize"].type.choices == formats["run"].type.choices == ("text", "markdown", "csv", "json")
