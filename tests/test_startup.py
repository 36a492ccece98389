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
