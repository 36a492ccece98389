"""Markdown and CSV renderings of the same findings as the terminal view (nsyscomm.views.findings),
each in its own idiom: Markdown with a heading per table and per block of lines; CSV as one table
whose first column names the table each row belongs to (docs/views.md, "CSV")."""

from __future__ import annotations

import io

import pandas as pd

from nsyscomm.analyses.result import Result
from nsyscomm.views import findings as F
from nsyscomm.views.safe import markdown_text
from nsyscomm.views.units import DEFAULT_UNITS

_MD_TITLES = {
    "nccl": "NCCL",
    "set_aside": "Set aside",
    "straggler": "Straggler",
    "withheld": "Withheld",
    "warning": "Warnings",
    "note": "Notes",
}


def _md_cell(v) -> str:
    # report text is untrusted: inert Markdown, headings and lines included
    return markdown_text(v)


def _md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def markdown(result: Result, units: str = DEFAULT_UNITS, by_caller: bool = False) -> str:
    parts = [f"# {_md_cell(F.headline(result))}", ""]
    for b in F.blocks(result, by_caller):
        if isinstance(b, F.Table):
            cols = [(i, c) for i, c in enumerate(b.cols) if c.shown]
            rows = [[F.display(r[i], c, units) for i, c in cols] for r in b.shown_rows]
            parts += [f"## {_md_cell(b.title)}", "", _md_table([F.header(c, units) for _, c in cols], rows), ""]
            parts += [f"{_md_cell(n)}" for n in b.notes] + ([""] if b.notes else [])
            continue
        parts += [f"## {_md_cell(b.title or _MD_TITLES.get(b.name, b.name))}", ""]
        for line in b.lines:
            # an indented line details the one above it
            depth = len(line) - len(line.lstrip(" "))
            parts.append(("  " if depth else "") + f"- {_md_cell(line.strip())}")
        parts.append("")
    return "\n".join(parts).rstrip("\n") + "\n"


def csv(result: Result, by_caller: bool = False) -> str:
    """Every finding as one CSV: the first column, `table`, names the table a row belongs to
    (summary, vs_reference, ranks, overlap, steps, size_histogram, link_metrics, top_skew), or
    the kind of a line of words (diagnosis, hang, nccl, straggler, what_if, warning, note, and a
    table's notes as TABLE_note), whose words are in the second column, `text`; the other
    columns are the union of the tables' columns, empty where a table has none. Counts and sizes are integers, times ms, bandwidth GB/s (the JSON's keys and
    units). Text cells are spreadsheet-safe (safe.csv_cell: a cell that would start a formula
    gets a leading ', control characters are shown; numbers stay numbers)."""
    from nsyscomm.views.safe import csv_cell

    records: list[dict] = []
    columns: dict[str, F.Col] = {}
    for b in F.blocks(result, by_caller):
        if isinstance(b, F.Table):
            # the summary's caller only with --by caller (its rows are per op and size otherwise)
            cols = [c for c in b.cols if not (b.name == "summary" and c.key == "caller" and not by_caller)]
            for c in cols:
                columns.setdefault(c.key, c)
            at = {c.key: i for i, c in enumerate(b.cols)}
            for r in b.rows:
                rec = {"table": b.name}
                for c in cols:
                    rec[c.key] = F.machine(r[at[c.key]], c)
                records.append(rec)
            records += [{"table": f"{b.name}_note", "text": n} for n in b.notes]
        else:
            records += [{"table": b.name, "text": line.strip()} for line in b.lines]
    names = ["table", "text", *columns]
    df = pd.DataFrame.from_records(records, columns=names)
    for key, c in columns.items():
        if c.kind in ("int", "bytes"):
            df[key] = df[key].astype("Int64")
    for key in ("table", "text", *[k for k, c in columns.items() if c.kind == "text"]):
        df[key] = df[key].map(lambda v: v if F.missing(v) else csv_cell(v)).astype(object)
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue()
