"""Command line: the ``nsyscomm`` group. Each command lives in nsyscomm.commands and is a thin
click layer over a library call (nsyscomm.api, nsyscomm.capture.launcher); this module only
assembles them."""

from __future__ import annotations

import gc
import importlib
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from nsyscomm import __version__, resources
from nsyscomm.commands.run import run
from nsyscomm.commands.summarize import summarize


def short_help(text: str, limit: int) -> str:
    """The first sentence of text, cut at a word with "..." to fit limit characters: how click
    shortens a command's help in `--help`, written here because click's helper for it is not
    part of its public API."""
    words: list[str] = []
    for w in text.split():
        words.append(w)
        if w.endswith("."):
            break
    line = " ".join(words)
    if len(line) <= limit:
        return line
    kept = ""
    for w in words:
        longer = f"{kept} {w}" if kept else w
        if len(longer) + 3 > limit:
            break
        kept = longer
    return kept + "..."


class _LazyGroup(click.Group):
    """The commands beyond summarize/run, imported only when one of them runs: `nsyscomm --help`
    lists them from _LAZY's short help without importing their modules, which would otherwise
    make every start-up pay for them (benchmarks/bench_startup.py)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _LAZY and name not in self.commands:
            module, attr, _ = _LAZY[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in _LAZY and name not in self.commands:
                rows.append((name, short_help(_LAZY[name][2], limit)))
            elif not self.commands[name].hidden:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


# name -> (module, attribute, the first line of its docstring: tests/cli/test_startup.py checks they agree)
_LAZY = {
    "gate": ("nsyscomm.commands.gate", "gate", "Fail CI when communication got slower than the baseline."),
    "baseline": (
        "nsyscomm.commands.gate",
        "baseline",
        "Write or update a gate baseline from reports or JSON summaries.",
    ),
    "trace": (
        "nsyscomm.commands.views",
        "trace",
        "Export collectives as a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing).",
    ),
    "report": (
        "nsyscomm.commands.views",
        "report",
        "Write a self-contained HTML report (works offline: no CDN, no network).",
    ),
    "export": (
        "nsyscomm.commands.export",
        "export",
        "Write the job of INPUTS (reports, folders) into OUT_DIR in another tool's format.",
    ),
}


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsyscomm")
def main() -> None:
    """nsyscomm: where the communication time of distributed training goes (Nsight Systems)."""
    commands_take_ctrl_c()
    quiet_numerics()


# Ctrl-C's handler before the program's start-up one (nsyscomm.__main__, which ends the process
# at once while only imports run): a command gets it back, and its guards handle Ctrl-C from there
ctrl_c_before_start: list[Callable[..., Any] | int | None] = []


def commands_take_ctrl_c() -> None:
    while ctrl_c_before_start:
        signal.signal(signal.SIGINT, ctrl_c_before_start.pop())


def quiet_numerics() -> None:
    """numpy's floating-point RuntimeWarnings (a division by zero, a mean of nothing) are for the
    programmer: the figures they concern come out as NaN or inf, which every view shows as '-',
    and the code that makes them is tested not to; a stray one never reaches the user's terminal."""
    import warnings

    for text in (r".*encountered in ", r"Mean of empty slice", r"Degrees of freedom <= 0", r"All-NaN slice"):
        warnings.filterwarnings("ignore", message=text, category=RuntimeWarning)


main.add_command(summarize)
main.add_command(run)


def _speak_its_encoding(stream: object) -> None:
    """A character the terminal's encoding lacks ("—" under PYTHONIOENCODING=ascii or the C
    locale) written as its escape (``\\u2014``) instead of ending the command: output is
    encoded for the terminal it gets."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and getattr(stream, "errors", None) in ("strict", "surrogateescape"):
        reconfigure(errors="backslashreplace")


def entry(args: Sequence[str] | None = None) -> None:
    """The `nsyscomm` command: main(), then a quick exit. Python's last garbage collection, at
    exit, walks every object pandas and pyarrow made, a cost every run would pay for nothing;
    frozen objects are skipped. Nothing
    left then needs a finalizer: each command's DuckDB databases are freed by reference counting
    when it returns.

    Click's own handling of errors, but for Ctrl-C: before a command has taken over (while click
    dispatches, on a loaded machine), click would end with "Aborted!" and status 1; it is one
    line and status 130 there too, as everywhere else."""
    for stream in (sys.stdout, sys.stderr):
        _speak_its_encoding(stream)
    resources.prepare()  # before numpy, pyarrow and DuckDB load
    argv = sys.argv[1:] if args is None else list(args)
    why = resources.check() if argv and not {"-h", "--help", "--version"} & set(argv) else None
    if why:
        click.echo(f"nsyscomm: error: {why}", err=True)
        sys.exit(2)
    try:
        rc = main(args, standalone_mode=False)
    except click.ClickException as e:
        e.show()
        rc = e.exit_code
    except click.Abort:
        click.echo("nsyscomm: interrupted", err=True)
        rc = 130
    except Exception as e:  # before a command's own guard (its imports): Ctrl-C, a limit named, else ours
        if _interruption(e):
            click.echo("nsyscomm: interrupted", err=True)
            rc = 130
        else:
            rc = _limit_reached(e)
    finally:
        gc.freeze()
    sys.exit(rc if isinstance(rc, int) else 0)


def _interruption(e: BaseException) -> bool:
    """Whether Ctrl-C is what e says under another name: a C extension's import cut by it ("ImportError:
    initialization failed", the KeyboardInterrupt as its cause), or DuckDB's query it stopped."""
    seen: BaseException | None = e
    for _ in range(8):  # a chain, never a cycle in practice: bounded all the same
        if seen is None:
            break
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    if "duckdb" not in sys.modules:  # nothing of DuckDB's ran: not imported for this question
        return False
    from nsyscomm.duck import interrupted

    return interrupted(e)


def _limit_reached(e: Exception) -> int:
    """Memory or open files ran out while a command loaded its libraries: one line, status 2."""
    from nsyscomm.commands import _first_line

    why = resources.out_of_files(e)
    if why is None and not resources.out_of_memory(e):
        raise e
    click.echo(f"nsyscomm: error: {why or f'out of memory ({_first_line(e)}); {resources.memory_fix()}'}", err=True)
    return 2


if __name__ == "__main__":
    entry()
