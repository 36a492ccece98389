"""A name never adds a line or a heading, and Markdown is inert: a caller, a process group, a host
and a kernel name (and the report's file name) that carry newlines, carriage returns, escapes,
Markdown links, images, emphasis, HTML, backticks and pipes are shown as text in every view:
text, Markdown (rendered, as GitHub renders a step summary), CSV, the trace, and the gate's lines,
heading and step summary."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from nsyscomm.cli import main
from tests.support import hostile_corpus as H

# what a crafted name carries: a new line that looks like the summary's own heading, a Markdown
# heading, an image and a link to an attacker's site, emphasis, HTML, a code span, a table break,
# a carriage return, a terminal escape and a C1 control
FORGED = (
    "\nDiagnosis\n## FORGED ![img](https://evil.invalid/x.png) [fix](https://evil.invalid) *em* _u_ "
    "<b>h</b> `c` |p|\r\x1b[2J\x85"
)
FILE_NAME = "cur\n# FORGED ![i](https:evil.png) [l](https:evil)\r.sqlite"


def forged(path: Path) -> Path:
    return H.sql(
        H.copy(H.DDP, path),
        "UPDATE StringIds SET value = replace(replace(value, 'caller=train.py:88 train_step', "
        "'caller=train.py:88 x' || ?), '|pg=0|', '|pg=0' || ? || '|') WHERE value LIKE 'nsyscomm:%'",
        "UPDATE StringIds SET value = replace(value, 'host=node-a', 'host=node' || ?) "
        "WHERE value LIKE 'nsyscomm.rank%'",
        "UPDATE StringIds SET value = value || ? WHERE value LIKE 'ncclDevKernel%'",
        params=(FORGED,),
    )


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("names")
    clean = Path(shutil.copy(H.DDP, d / "clean.sqlite"))
    return clean, forged(d / FILE_NAME)


def _out(*args: str | Path, env: dict | None = None, code: int = 0) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert r.exit_code == code, r.output
    return r.stdout


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(markdown)


def _rendered_tags(markdown: str) -> dict[str, int]:
    page = _html(markdown)
    return {t: len(re.findall(f"<{t}[ >]", page)) for t in ("a", "img", "em", "strong", "code", "h1", "h2", "h3", "s")}


@pytest.mark.parametrize("by", ["op", "caller"])
def test_the_text_summary_has_the_lines_of_a_clean_one(reports, by):
    clean, bad = reports
    a, b = _out("summarize", clean, "--by", by), _out("summarize", bad, "--by", by)
    assert not re.search(r"^#|^\s*## FORGED|[\r\x1b\x85]", b, re.M)
    assert [x for x in b.splitlines() if x == "Diagnosis"] == ["Diagnosis"]

    def headings(text: str) -> list[str]:  # lines at the margin, but the headline (the file's name)
        return [x for x in text.splitlines() if x and not x[0].isspace()][1:]

    assert headings(b) == headings(a)


@pytest.mark.parametrize("by", ["op", "caller"])
def test_the_markdown_summary_renders_as_text(reports, by):
    clean, bad = reports
    md = _out("summarize", bad, "--format", "markdown", "--by", by)
    assert _rendered_tags(md) == _rendered_tags(_out("summarize", clean, "--format", "markdown", "--by", by))
    page = _html(md)
    assert "evil.invalid" in page and "href" not in page and "<b>" not in page
    assert "![img](https://evil.invalid/x.png)" in re.sub(r"\\(.)", r"\1", md)  # shown, as text


def test_the_csv_summary_has_the_rows_of_a_clean_one(reports):
    clean, bad = reports
    rows = list(csv.reader(io.StringIO(_out("summarize", bad, "--format", "csv"))))
    assert len(rows) == len(list(csv.reader(io.StringIO(_out("summarize", clean, "--format", "csv")))))
    assert not any(re.search(r"[\n\r\x1b\x85]", c) for r in rows for c in r)


def test_the_trace_names_are_one_line(reports, tmp_path):
    _, bad = reports
    _out("trace", bad, "-o", tmp_path / "t.json", "--per-rank", tmp_path / "ranks")
    for f in [tmp_path / "t.json", *sorted((tmp_path / "ranks").rglob("comm.json"))]:
        for e in json.loads(f.read_text(encoding="utf-8"))["traceEvents"]:
            labels = [e.get("name"), *(e.get("args", {}).get(k) for k in ("name", "labels") if e.get("ph") == "M")]
            assert not any(isinstance(x, str) and re.search(r"[\n\r\x1b\x85]", x) for x in labels), e


def test_the_gate_heading_lines_and_step_summary_stay_inert(reports, tmp_path):
    clean, bad = reports
    base = tmp_path / "base.json"
    _out("baseline", clean, "-o", base)
    summary = tmp_path / "summary.md"
    text = _out("gate", bad, "-b", base, "--by", "caller", env={"GITHUB_STEP_SUMMARY": str(summary)}, code=1)
    lines = text.splitlines()
    assert lines[0].startswith("FAIL") and lines[1].startswith("baseline: ") and "current: cur\\n#" in lines[1]
    assert not re.search(r"^\s*#|^Diagnosis|[\r\x1b\x85]", text, re.M)
    md = _out("gate", bad, "-b", base, "--by", "caller", "--format", "markdown", code=1)
    for doc in (md, summary.read_text(encoding="utf-8")):
        tags = _rendered_tags(doc)
        assert (tags["h1"], tags["h2"], tags["h3"], tags["a"], tags["img"], tags["em"]) == (0, 0, 1, 0, 0, 0), tags
        assert "FAIL" in doc.splitlines()[0] and "href" not in _html(doc)
