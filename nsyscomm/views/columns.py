"""The column contract every format of the summary keeps: a table's columns (key, label, kind,
whether the text and Markdown tables show it), its rows as data, how a cell is written for people
(`display`) and for a CSV (`machine`), and what a format leaves out on purpose (`ABSENT`).
nsyscomm.views.findings makes the tables; docs/views.md, "Columns of every format", lists them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nsyscomm.views.units import DEFAULT_UNITS, bandwidth, fmt, human_bytes, unit_label


@dataclass
class Col:
    key: str  # machine name: the CSV column, the JSON's key where it has one
    label: str  # the header people read (text, Markdown)
    kind: str = "text"  # text, int, ms, bytes, bw, pct, ratio, flag (a yes/no: its label shown for yes)
    digits: int | None = None  # decimals shown to people (default: the kind's)
    shown: bool = True  # False: not in the text and Markdown tables (they keep DeepSpeed's columns)


@dataclass
class Table:
    name: str  # the CSV's `table` value
    title: str
    cols: list[Col]
    rows: list[list]
    notes: list[str] = field(default_factory=list)  # lines under the table
    people_rows: int | None = None  # the rows the text and Markdown tables show (None: all; CSV has all)

    @property
    def shown_rows(self) -> list[list]:
        return self.rows if self.people_rows is None else self.rows[: self.people_rows]


@dataclass
class Lines:
    name: str  # the CSV's `table` value: diagnosis, hang, nccl, straggler, what_if, warning, note
    title: str | None
    lines: list[str]


Block = Table | Lines


# The columns a format leaves out of a table on purpose, (table, column) -> (formats, why); every
# other column of a table is in every format: the text and Markdown tables show a column unless
# it is marked shown=False (then CSV, JSON and HTML have it), the HTML renders HTML_TABLES from
# these rows and draws the others as charts. docs/views.md, "Columns of every format", lists them.
ABSENT: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("summary", "caller"): (("text", "markdown", "csv", "html"), "without --by caller every row's caller is null"),
    ("top_skew", "group_seq"): (("json",), "JSON has group and seq apart"),
    ("size_histogram", "size_range"): (("json",), "JSON has bin_lo and bin_hi"),
    ("vs_reference", "pct_of_ref"): (("json",), "JSON has busbw_vs_ref, the same figure as a ratio"),
    ("overlap", "step"): (
        ("text", "markdown", "csv", "html"),
        "null in JSON's overlap.per_rank; per step: steps.exposed_ms",
    ),
}
# the tables the HTML report renders from these rows (the others it draws as charts)
HTML_TABLES = ("summary", "ranks", "rank_ops")


def missing(v: Any) -> bool:
    return (
        v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or (not isinstance(v, str) and pd.isna(v))
    )


def header(col: Col, units: str = DEFAULT_UNITS) -> str:
    """The column's header for people, a bandwidth's in the chosen unit."""
    return col.label.replace("{unit}", unit_label(units))


def display(v: Any, col: Col, units: str = DEFAULT_UNITS) -> str:
    """A cell for people: sizes human-readable, bandwidth in `units`, times in ms to the µs."""
    if col.kind == "bytes":
        return human_bytes(None if missing(v) else v)
    if col.kind == "flag":
        return col.label if v is True or (not missing(v) and bool(v)) else ""
    if missing(v):
        return "-"
    if col.kind == "int":
        return str(int(v))
    if col.kind == "ms":
        return fmt(float(v), 3 if col.digits is None else col.digits)
    if col.kind == "bw":
        return fmt(bandwidth(float(v), units), 2)
    if col.kind == "pct":
        return fmt(float(v), 2 if col.digits is None else col.digits)
    if col.kind == "ratio":
        return fmt(float(v), 3)
    return str(v)


def machine(v: Any, col: Col) -> Any:
    """A cell for a CSV: counts and sizes as integers, times in ms to the ns, bandwidth in GB/s
    to the MB/s, percentages to a hundredth; missing values empty."""
    if missing(v):
        return None
    if col.kind == "flag":
        return bool(v)
    if col.kind in ("int", "bytes"):
        return int(v)
    if col.kind == "ms":
        return round(float(v), 6)
    if col.kind in ("bw", "pct", "ratio"):
        return round(float(v), {"bw": 3, "pct": 2, "ratio": 4}[col.kind])
    return v


def contract_cols(keys: tuple[str, ...], cols: list[Col]) -> list[Col]:
    """The JSON contract's keys of a table that its columns above do not name, as columns of the
    CSV (kind told by the key's unit): a key added to the contract reaches every machine format
    at once; the text and Markdown tables keep their layout until it is given a label there."""
    have = {c.key for c in cols}
    kind = {"_ms": "ms", "GBps": "bw", "_pct": "pct", "bytes": "bytes"}
    return [
        Col(k, k, next((v for end, v in kind.items() if k.endswith(end)), "text"), shown=False)
        for k in keys
        if k not in have
    ]
