"""Terminal tables: DeepSpeed's comms-logger summary, then mpitrace's per-rank table and skew.
The findings and their order are nsyscomm.views.findings' (the same in every format); this
module draws them with rich."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from nsyscomm.analyses.result import Result
from nsyscomm.views import findings as F
from nsyscomm.views.safe import markup_text as escape
from nsyscomm.views.units import DEFAULT_UNITS

# how each block of lines is written: its title in bold, each line's prefix and markup
_LINE_STYLE = {
    "hang": ("", "[bold red]{}[/]"),
    "diagnosis": ("  ", "{}"),
    "what_if": ("  ", "{}"),
    "withheld": ("", "[yellow]{}[/]"),
    "warning": ("", "[yellow]warning:[/] {}"),
    "note": ("", "note: {}"),
}


def summary_table(table: F.Table, units: str = DEFAULT_UNITS, by_caller: bool = False) -> Table:
    """DeepSpeed's layout: one heading row per op (and caller), then a row per message size."""
    t = Table(box=box.SIMPLE_HEAD, title=escape(table.title) if table.title else None, title_justify="left")
    cols = [c for c in table.cols if c.shown and c.key != "caller"]
    for c in cols:
        t.add_column(F.header(c, units), justify="left" if c.key == "op" else "right")
    at = {c.key: i for i, c in enumerate(table.cols)}
    block = None
    for row in table.rows:
        op, caller = row[at["op"]], row[at["caller"]]
        key = (op, caller if by_caller else None)
        if key != block:
            block = key
            head = op if not by_caller else f"{op} | [Caller Func: {caller if isinstance(caller, str) else '?'}]"
            t.add_row(escape(str(head)), *[""] * (len(cols) - 1))
        t.add_row("", *[escape(F.display(row[at[c.key]], c, units)) for c in cols[1:]])
    return t


def table(block: F.Table, units: str = DEFAULT_UNITS) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=escape(block.title) if block.title else None, title_justify="left")
    cols = [(i, c) for i, c in enumerate(block.cols) if c.shown]
    for n, (_, c) in enumerate(cols):
        t.add_column(F.header(c, units), justify="left" if n == 0 and c.kind == "text" else "right")
    last = None
    for row in block.shown_rows:
        cells = [F.display(row[i], c, units) for i, c in cols]
        # a repeated leading op is left blank, as mpitrace does
        if cols and cols[0][1].key in ("op", "rank") and block.name in ("size_histogram", "link_metrics", "rank_ops"):
            shown = cells[0] if cells[0] != last else ""
            last = cells[0]
            cells[0] = shown
        t.add_row(*[escape(x) for x in cells])
    return t


def render(result: Result, console: Console, units: str = DEFAULT_UNITS, by_caller: bool = False) -> None:
    blocks = F.blocks(result, by_caller)
    head = F.headline(result)
    console.print(escape(head) if result.n_calls == 0 else f"[bold]nsyscomm[/]{escape(head[len('nsyscomm') :])}")
    for b in blocks:
        if isinstance(b, F.Table):
            console.print(summary_table(b, units, by_caller) if b.name == "summary" else table(b, units))
            for line in b.notes:
                console.print(escape(line))
            continue
        prefix, style = _LINE_STYLE.get(b.name, ("", "{}"))
        if b.title and b.name != "hang":  # the hang's first line is its own heading
            console.print(
                f"[bold]{escape(b.title.split(' ', 1)[0])}[/]" + escape(b.title[len(b.title.split(" ", 1)[0]) :])
            )
        for line in b.lines:
            if b.name == "hang" and line.startswith(" "):
                console.print(escape(line))
            else:
                console.print(prefix + style.format(escape(line)))
