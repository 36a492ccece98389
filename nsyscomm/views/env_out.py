"""``summarize --include-env``: the reports' recorded environment, only when the user asks for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result


def emit_with_env(
    result: Result,
    envs: dict,
    fmt: str,
    units: str,
    by_caller: bool,
    emit: Callable[[Result, str, str, bool], None],
) -> None:
    """The summary with the reports' recorded environment (nsyscomm.api.environment) after it."""
    if fmt == "json":
        from nsyscomm.views.json_out import document

        doc = document(result, by_caller)
        doc["environment"] = envs
        click.echo(json.dumps(doc, indent=2, allow_nan=False, default=str))
        return
    emit(result, fmt, units, by_caller)
    if fmt == "csv":  # one table per document: the environment would break it
        click.echo("nsyscomm: --include-env has no place in CSV output; use --format json", err=True)
        return
    head = "## Environment" if fmt == "markdown" else "Environment (recorded in the reports; --include-env)"
    lines = ["", head, ""]
    for report, e in envs.items():
        lines.append(f"{report}:")
        for k, v in e.get("system", {}).items():
            lines.append(f"  system {k} = {v}")
        for k, v in e.get("capture", {}).items():
            lines.append(f"  capture {k} = {v}")
        for p in e.get("processes", []):
            lines.append(f"  process {p['pid']}: {p['name']}")
        for v in e.get("variables", []):
            lines.append(f"  {v}")
    from nsyscomm.views.safe import markdown_text, visible_line

    lines = [visible_line(x) for x in lines]  # a value never adds a line
    if fmt == "markdown":  # each value in an indented code block: shown as is, never rendered
        lines = [f"    {x}" if x.startswith("  ") else (x if x.startswith("## ") else markdown_text(x)) for x in lines]
    click.echo("\n".join(lines))
