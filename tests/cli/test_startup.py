"""Start-up: `nsyscomm --help` imports no command module beyond summarize/run, nor pandas,
numpy, pyarrow or duckdb; the lazily registered commands' help matches their own."""

from __future__ import annotations

import importlib
import subprocess
import sys

from click.testing import CliRunner

from nsyscomm import cli

HEAVY = (
    "pandas",
    "numpy",
    "pyarrow",
    "duckdb",
    "rich",
    "nsyscomm.api",
    "nsyscomm.commands.gate",
    "nsyscomm.commands.views",
    "nsyscomm.commands.export",
    "nsyscomm.capture.launcher",
)


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from nsyscomm.cli import entry\n"
        "try:\n    entry(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('loaded:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Commands:" in out
    assert out.strip().splitlines()[-1] == "loaded:"


def test_lazy_short_help_is_the_commands_own():
    for name, (module, attr, short) in cli._LAZY.items():
        command = getattr(importlib.import_module(module), attr)
        assert command.name == name
        assert command.get_short_help_str(limit=1000) == short, name


def test_every_command_listed_and_runnable():
    res = CliRunner().invoke(cli.main, ["--help"])
    assert res.exit_code == 0
    listed = [line.split()[0] for line in res.output.split("Commands:")[1].strip().splitlines()]
    assert listed == sorted(["summarize", "run", *cli._LAZY])
    for name in cli._LAZY:
        sub = CliRunner().invoke(cli.main, [name, "--help"], prog_name="nsyscomm")
        assert sub.exit_code == 0 and f"nsyscomm {name}" in sub.output


def test_collector_paused_restores_the_collector_and_freezes():
    """The analysis stack is imported with the collector off; it is on again afterwards (off if it
    was off), after a failed import too, and what was made in the block is frozen."""
    import gc

    import pytest

    from nsyscomm.commands import collector_paused

    assert gc.isenabled()
    try:
        with collector_paused():
            assert not gc.isenabled()
            made = [[] for _ in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
        with pytest.raises(ImportError), collector_paused():
            import nsyscomm_no_such_module  # noqa: F401
        assert gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_summarize_imports_with_the_collector_paused():
    """A summarize imports pandas inside collector_paused: afterwards pandas is loaded, its
    objects are frozen, and the collector is on again for the work."""
    from nsyscomm.discover import sample_reports_dir

    probe = (
        "import contextlib, gc, sys\n"
        "import nsyscomm.cli as cli\n"
        "import nsyscomm.commands.summarize as summarize\n"
        "seen = []\n"
        "real = summarize.collector_paused\n"
        "@contextlib.contextmanager\n"
        "def spy():\n"
        "    with real():\n"
        "        yield\n"
        "    seen.append(('pandas' in sys.modules, gc.isenabled(), gc.get_freeze_count() > 10000))\n"
        "summarize.collector_paused = spy\n"
        "try:\n"
        "    cli.entry(['summarize', '--no-cache', '--format', 'json', sys.argv[1]])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(seen, file=sys.stderr)\n"
    )
    sample = str(sample_reports_dir() / "synthetic_ddp_4rank.sqlite")
    res = subprocess.run([sys.executable, "-c", probe, sample], capture_output=True, text=True)
    assert res.stderr.strip().splitlines()[-1] == "[(True, True, True)]", res.stderr


def test_short_help_keeps_the_first_sentence_and_cuts_at_a_word():
    """The lazy commands' line in `nsyscomm --help`, cut as click cuts a loaded command's."""
    assert cli.short_help("Fail CI when it got slower. Exit status 1.", 100) == "Fail CI when it got slower."
    text = "Write the job of INPUTS (reports, folders) into OUT_DIR in another tool's format."
    assert cli.short_help(text, 45) == "Write the job of INPUTS (reports, folders)..."
    for limit in range(8, 90):
        short = cli.short_help(text, limit)
        assert len(short) <= limit and text.startswith(short.removesuffix("..."))


def test_only_click_public_api():
    """click's submodules (click.utils and the like) are not its public API: 9.0 removes names
    that 8.5 deprecates, and a deprecated one prints a warning before every message of ours."""
    import re
    from pathlib import Path

    import nsyscomm

    private = re.compile(r"^\s*(from\s+click\.\w+\s+import|import\s+click\.)", re.M)
    pkg = Path(nsyscomm.__file__).resolve().parent
    offenders = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if private.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
