"""``nsyscomm export``: a job in another tool's input format (registered by nsyscomm.cli)."""

from __future__ import annotations

import os

import click

from nsyscomm.commands import collector_paused
from nsyscomm.commands import guard as _guard
from nsyscomm.commands.options import debug_option, inputs_argument, merge_option

# where `nsyscomm export` alone writes (the bundled samples' job), the folder the README names
DEFAULT_OUT_DIR = "whatif-trace"


@click.command("export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["whatif"]),
    default="whatif",
    show_default=True,
    help="whatif: the per-op trace of the OSDI'25 straggler study's artifact "
    "(trace-NAME.parquet + meta-NAME.yaml; ByteDance-Seed/StragglerAnalysis).",
)
@click.option("--name", default="nsyscomm", show_default=True, help="The trace's name (trial_name).")
@merge_option
@debug_option
@click.argument("out_dir", required=False, type=click.Path(file_okay=False, path_type=str))
@inputs_argument
def export(fmt: str, name: str, merge: bool, debug: bool, out_dir: str | None, inputs: tuple[str, ...]) -> None:
    """Write the job of INPUTS (reports, folders) into OUT_DIR in another tool's format.
    With no INPUTS, the bundled sample reports are used; with no OUT_DIR either, it is
    whatif-trace/."""
    out_dir = out_dir or DEFAULT_OUT_DIR
    with collector_paused():
        from nsyscomm.analyses import trace_export
        from nsyscomm.api import load

    from nsyscomm.commands import outputs

    _guard(lambda: outputs.check(out_dir, inputs, flag="OUT_DIR", folder=True), debug)
    result = _guard(lambda: load(list(inputs) or None, merge=merge), debug)

    def _write() -> list[str]:
        with outputs.folder(out_dir) as tmp:
            files = trace_export.write(result, tmp, name)
        return [os.path.join(out_dir, f.name) for f in files]

    for f in _guard(_write, debug):
        click.echo(f"wrote {outputs.shown(f)}", err=True)
