"""One contract, every format: text, Markdown, CSV, JSON and HTML of the same job carry the same
columns and the same rows. The walk is generic over the columns: it reads each table's columns
from nsyscomm.views.findings and each JSON section's keys from the document, so a column added to
the contract is walked without a line here; what a format leaves out on purpose is
columns.ABSENT (read through findings), and docs/views.md ("Columns of every format") names every column."""

from __future__ import annotations

import html
import io
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console

from nsyscomm import api
from nsyscomm.cli import main
from nsyscomm.views import findings as F
from nsyscomm.views import html_report, json_out
from nsyscomm.views import tables as tables_view
from nsyscomm.views import text as text_view
from nsyscomm.views.safe import markdown_text
from tests.conftest import REAL, SAMPLES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "views.md"
NCCL_LOG = REAL / "nccl-logs" / "aws-p5-h100-16rank-nccl-debug-info.log"

# each findings table and where the JSON document holds its rows
JSON_AT = {
    "summary": ("summary",),
    "ranks": ("ranks",),
    "rank_ops": ("rank_ops",),
    "overlap": ("overlap", "per_rank"),
    "steps": ("steps",),
    "size_histogram": ("size_histogram",),
    "link_metrics": ("link_metrics",),
    "top_skew": ("top_skew",),
    "vs_reference": ("nccl", "vs_reference"),
}

JOBS = {
    "ddp_4rank": (["synthetic_ddp_4rank.sqlite"], []),
    "ddp_4rank_by_caller": (["synthetic_ddp_4rank.sqlite"], ["--by", "caller"]),
    "gloo_cpu": (["synthetic_gloo_cpu.sqlite"], []),
    "nowrapper_2node": (["synthetic_nowrapper_2node"], []),
    "ddp_4rank_nccl_log": (["synthetic_ddp_4rank.sqlite"], ["--nccl-log", str(NCCL_LOG)]),
}


def _absent(table: str, key: str, fmt: str) -> bool:
    return fmt in F.ABSENT.get((table, key), ((), ""))[0]


def _json_rows(doc: dict, table: str) -> list[dict]:
    at: object = doc
    for k in JSON_AT[table]:
        at = at.get(k) if isinstance(at, dict) else None
    return at or []  # type: ignore[return-value]


def _same(a, b, col: F.Col) -> bool:
    """A CSV cell against the JSON's value of the same column, at the CSV's rounding."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None
    if b is None:
        return False
    if col.kind in ("ms", "bw", "pct", "ratio"):
        places = {"ms": 6, "bw": 3, "pct": 2, "ratio": 4}[col.kind]
        return abs(float(a) - float(b)) <= 0.51 * 10**-places
    if col.kind in ("int", "bytes"):
        return int(a) == int(b)  # the CSV writes integers as integers
    return str(a) == str(b)


def _run(args: list[str]) -> str:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_format_carries_every_json_column(job, tmp_path):
    inputs, extra = JOBS[job]
    if "--nccl-log" in extra and not NCCL_LOG.exists():
        pytest.skip(f"{NCCL_LOG} absent (the real data set)")
    paths = [str(SAMPLES / p) for p in inputs]
    by_caller = "caller" in extra
    nccl = [extra[extra.index("--nccl-log") + 1]] if "--nccl-log" in extra else []
    # one load, every format drawn from it as the commands draw them
    result = api.load(paths, nccl_logs=nccl)
    tables = {b.name: b for b in F.blocks(result, by_caller) if isinstance(b, F.Table)}
    doc = json.loads(json_out.dumps(result, by_caller))
    csv = pd.read_csv(io.StringIO(tables_view.csv(result, by_caller)), dtype=str)
    console = Console(width=250, record=True, soft_wrap=True)
    text_view.render(result, console, by_caller=by_caller)
    text = console.export_text()
    md = tables_view.markdown(result, by_caller=by_caller)
    page = html.unescape(html_report.render(result))
    if job == "ddp_4rank":  # the commands print the same document
        assert json.loads(_run(["summarize", *paths, *extra, "--format", "json"]))["summary"] == doc["summary"]
    walked = 0
    for name in JSON_AT:
        rows = _json_rows(doc, name)
        table = tables.get(name)
        if not rows:
            assert table is None or not table.rows, name
            continue
        assert table is not None, f"{name}: in the JSON, in no other format"
        keys = set().union(*(r.keys() for r in rows))
        cols = {c.key: c for c in table.cols}
        for key in keys - set(cols):
            assert _absent(name, key, "text"), f"{name}.{key}: a JSON column the other formats lack"
        for key in set(cols) - keys:
            assert _absent(name, key, "json"), f"{name}.{key}: a column the JSON lacks"
        # CSV: the same rows, the same values
        got = csv[csv["table"] == name].reset_index(drop=True)
        assert len(got) == len(table.rows)
        n = min(len(rows), len(got))  # the JSON's top_skew keeps 10, the tables 5
        assert n == len(rows) or name == "top_skew", name
        for key, col in cols.items():
            if key not in keys or _absent(name, key, "csv"):
                continue
            assert key in got.columns, f"{name}.{key} not in the CSV"
            for i in range(n):
                v = got.loc[i, key]
                assert _same(None if pd.isna(v) else v, rows[i].get(key), col), (name, key, i, v, rows[i].get(key))
        # text and Markdown: every column shown (or in the CSV only, as docs/views.md says), every
        # row's cells in the order of the table
        shown = [c for c in table.cols if c.shown]
        for c in table.cols:
            if not c.shown:
                continue
            assert F.header(c) in text and F.header(c) in md, (name, c.key)
        for r in table.shown_rows[:n]:
            at = {c.key: i for i, c in enumerate(table.cols)}
            cells = [F.display(r[at[c.key]], c) for c in shown]
            # (each cell as the Markdown view makes any report text inert: views/safe.py)
            assert "| " + " | ".join(markdown_text(x) for x in cells) + " |" in md, (name, cells)
            # the text's summary heads each op's (and caller's) block with it; other tables leave a
            # repeated leading cell blank, as mpitrace does
            heading = ("op", "caller") if name == "summary" else (shown[0].key,)
            later = [x for c, x in zip(shown, cells) if x and c.key not in heading]
            assert any(_in_order(line, later) for line in text.splitlines()), (name, cells)
        if name in F.HTML_TABLES:
            for c in table.cols:
                if not _absent(name, c.key, "html"):
                    assert f">{F.header(c)}</th>" in page, (name, c.key)
            for r in table.rows[:n]:
                cells = [F.display(r[at[c.key]], c) for c in table.cols if not _absent(name, c.key, "html")]
                assert "".join(f">{x}</td>" for x in cells[:3]) in re.sub(r"<td[^>]*>", ">", page), (name, cells)
        walked += 1
    assert walked >= 4


def _in_order(line: str, cells: list[str]) -> bool:
    at = 0
    for c in cells:
        at = line.find(c, at)
        if at < 0:
            return False
        at += len(c)
    return True


def test_docs_name_every_column_of_every_table():
    """docs/views.md's "Columns of every format" has a row per table naming each of its columns,
    and each deliberate absence."""
    text = DOCS.read_text()
    section = text[text.index("### Columns of every format") :]
    result = api.load([SAMPLES / "synthetic_ddp_4rank.sqlite"], nccl_logs=[NCCL_LOG] if NCCL_LOG.exists() else [])
    tables = [F.summary(result), F.ranks(result), F.rank_ops(result), F.overlap(result), F.steps(result)]
    tables += [F.histogram(result), F.links(result), F.top_skew(result), F.vs_reference(result)]
    for t in tables:
        row = next((ln for ln in section.splitlines() if ln.startswith(f"| `{t.name}` ")), None)
        assert row is not None, f"no row for {t.name}"
        for c in t.cols:
            assert f"`{c.key}`" in row, f"{t.name}.{c.key} not in docs/views.md"
    for table, key in F.ABSENT:
        assert f"`{table}.{key}`" in section, (table, key)
