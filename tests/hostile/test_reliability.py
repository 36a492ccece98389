"""Each finding of the hostile corpus, as a regression test (the inputs are built by
tests/support/hostile_corpus.py; the whole corpus runs in tests/hostile/test_hostile_corpus.py)."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.support import hostile_corpus as H

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(r, path: Path) -> None:
    assert r.exit_code == 2, r.output[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("nsyscomm: error:") and path.name in lines[0], r.stderr
    assert "Traceback" not in r.output and "internal error" not in r.output


# ---------------------------------------------------------------------------- 1. views


@pytest.mark.parametrize("table", ["NVTX_EVENTS", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL"])
def test_a_view_in_place_of_a_table_is_refused_at_once(tmp_path, table):
    p = H.recursive_view(tmp_path / "v.sqlite", table)
    # a subprocess with a timeout: before the fix every command read the endless view until killed
    for args in (["summarize", p], ["trace", p, "-o", tmp_path / "t.json"], ["baseline", p, "-o", tmp_path / "b.json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "nsyscomm.cli", *map(str, args)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and p.name in lines[0] and "view" in lines[0] and "nsys export" in lines[0], lines


def test_every_sqlite_route_refuses_a_view(tmp_path):
    """The readers that open a report on their own, not through open_report, check it too."""
    from nsyscomm.errors import InputError
    from nsyscomm.ingest.nsys import reader as nsys_reader

    p = H.recursive_view(tmp_path / "v.sqlite")
    with pytest.raises(InputError, match="view"):
        nsys_reader.table_columns(p)


# ---------------------------------------------------------------------------- 2. bad values


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("|bytes=", "|bytes=-", "bytes"),
        ("|bytes=", "|bytes=99999999999", "bytes"),
        ("|numel=", "|numel=-", "numel"),
        ("|gsize=4", "|gsize=-4", "gsize"),
    ],
)
def test_impossible_sizes_in_wrapper_messages_are_a_clean_error(tmp_path, old, new, field):
    p = H.renamed_messages(tmp_path / "r.sqlite", old, new)
    for args in (
        ["summarize", p],
        ["summarize", p, "--format", "json"],
        ["trace", p, "-o", tmp_path / "t.json"],
        ["report", p, "-o", tmp_path / "r.html"],
        ["baseline", p, "-o", tmp_path / "b.json"],
    ):
        r = run(*args)
        one_line_error(r, p)
        assert f"{field}=" in r.stderr, r.stderr


KINETO = [
    "kineto_name_list",
    "kineto_name_int",
    "kineto_cat_list",
    "kineto_args_list",
    "kineto_kernel_args_list",
    "kineto_ts_nan",
    "kineto_ts_infinity",
    "kineto_dur_infinity",
    "kineto_ts_string",
    "kineto_big_int",
    "kineto_nested_deep",
]


@pytest.fixture(scope="module")
def kineto_cases(tmp_path_factory):
    return H.kineto_cases(tmp_path_factory.mktemp("kineto"))


@pytest.mark.parametrize("case", KINETO)
def test_profiler_traces_with_wrong_types_are_a_clean_error(kineto_cases, tmp_path, case):
    p = kineto_cases[case][0]
    for args in (["summarize", p], ["trace", p, "-o", tmp_path / "t.json"]):
        one_line_error(run(*args), p)


def test_a_valid_profiler_trace_still_reads(tmp_path):
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(H.kineto_trace()))
    r = run("summarize", p, "--format", "json")
    assert r.exit_code == 0, r.output
    assert [s["op"] for s in json.loads(r.stdout)["summary"]] == ["all_reduce"]


# ---------------------------------------------------------------------------- 3. long names


def test_a_10mb_name_is_cut_with_a_marker_and_one_warning(tmp_path):
    """Cut when read (in SQL for an SQLite report), so that memory follows the number of calls:
    10 MB caller, summarize peak RSS 733 MB -> about 200 MB (README, Reliability)."""
    from nsyscomm.ingest.limits import CUT_MARK, MAX_NAME

    p = H.huge_name(tmp_path / "r.sqlite")
    doc = json.loads(run("summarize", p, "--format", "json", "--by", "caller").stdout)
    callers = [s["caller"] for s in doc["summary"] if s["op"] == "broadcast"]
    # cut where the report is read (the message holds the caller): the first characters kept
    assert callers and all(c.endswith("x" * 1000 + CUT_MARK) and len(c) <= MAX_NAME + len(CUT_MARK) for c in callers), [
        len(c) for c in callers
    ]
    assert sum("cut" in w for w in doc["warnings"]) == 1, doc["warnings"]


# ---------------------------------------------------------------------------- 4. WAL / journals


def _listing(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in d.iterdir()}


@pytest.mark.parametrize("mode", ["WAL", "PERSIST", "TRUNCATE", "DELETE"])
def test_opening_a_report_writes_nothing_beside_it(tmp_path, mode):
    p = H.journal_mode(tmp_path / "r.sqlite", mode)
    before = _listing(tmp_path)
    for args in (["summarize", p, "--format", "json"], ["summarize", p]):
        r = run(*args)
        assert r.exit_code == 0, r.output
        assert _listing(tmp_path) == before
    out = tmp_path.parent / f"{tmp_path.name}-out"
    out.mkdir()
    for args in (
        ["trace", p, "-o", out / "t.json"],
        ["report", p, "-o", out / "r.html"],
        ["baseline", p, "-o", out / "b.json"],
    ):
        assert run(*args).exit_code == 0
        assert _listing(tmp_path) == before


def test_the_wal_copy_reads_the_same_as_the_report(tmp_path):
    wal = H.journal_mode(tmp_path / "w.sqlite", "WAL")
    plain = H.journal_mode(tmp_path / "p.sqlite", "DELETE")
    a = json.loads(run("summarize", wal, "--format", "json").stdout)["summary"]
    b = json.loads(run("summarize", plain, "--format", "json").stdout)["summary"]
    assert a == b and a


# ---------------------------------------------------------------------------- 5. terminal


@pytest.fixture(scope="module")
def escapes(tmp_path_factory):
    d = tmp_path_factory.mktemp("esc")
    return H.escapes_everywhere(d / "r.sqlite")


@pytest.mark.parametrize(
    "args",
    [
        ["summarize"],
        ["summarize", "--format", "markdown"],
        ["summarize", "--by", "caller"],
        ["summarize", "--by", "caller", "--format", "markdown"],
        ["summarize", "--format", "csv", "--by", "caller"],
        ["summarize", "--format", "json"],
    ],
)
def test_summarize_shows_control_characters_visibly(escapes, args):
    r = run(args[0], escapes, *args[1:])
    assert r.exit_code == 0, r.output
    assert not RAW_CONTROL.search(r.stdout), repr(RAW_CONTROL.search(r.stdout))
    assert not RAW_CONTROL.search(r.stderr)
    if "json" not in args:
        # shown, not executed (Markdown's own backslash escapes undone: the text a reader sees)
        shown = re.sub(r"\\(.)", r"\1", r.stdout) if "markdown" in args else r.stdout
        assert "\\x1b[2J" in shown


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_gate_shows_control_characters_visibly(escapes, fmt):
    r = run(
        "gate",
        escapes,
        "-b",
        H.DDP,
        "--format",
        fmt,
        "--show",
        "all",
        "--by",
        "caller",
        "--min-calls",
        "0",
        "--no-step-summary",
    )
    assert r.exit_code in (0, 1), r.output
    assert not RAW_CONTROL.search(r.output), repr(RAW_CONTROL.search(r.output))
    assert "\\x1b" in r.output


# ---------------------------------------------------------------------------- 6. JUnit


def test_junit_parses_with_forbidden_xml_characters(escapes, tmp_path):
    out = tmp_path / "junit.xml"
    r = run("gate", escapes, "-b", H.DDP, "--by", "caller", "--min-calls", "0", "--no-step-summary", "--junit", out)
    assert r.exit_code in (0, 1), r.output
    root = ET.parse(out).getroot()
    names = [c.get("name") for c in root.iter("testcase")]
    assert any("\\x00" in n for n in names), names


# ---------------------------------------------------------------------------- 7. CSV


def test_csv_neutralises_formulas_but_keeps_numbers(tmp_path):
    p = H.formula_names(tmp_path / "r.sqlite")
    r = run("summarize", p, "--format", "csv", "--by", "caller")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    callers = {row["caller"] for row in rows}
    assert '\'=HYPERLINK("http://x.invalid","y")' in callers and "'@SUM(1+1)" in callers, callers
    for row in rows:
        for v in row.values():
            assert not v.startswith(("=", "+", "@", "\t", "\r")), row
            if v.startswith("-"):
                float(v)  # a negative number, never text


def test_csv_cell_rules():
    from nsyscomm.views.safe import csv_cell

    assert csv_cell("-12.5") == "-12.5" and csv_cell("-1e3") == "-1e3" and csv_cell(-3) == -3
    assert csv_cell("-cmd") == "'-cmd" and csv_cell("=1+1") == "'=1+1" and csv_cell("\tx") == "'\\tx"
    assert csv_cell("train.py:88") == "train.py:88"


# ---------------------------------------------------------------------------- 8. two runs


def test_two_runs_keep_each_ranks_host(tmp_path):
    H.two_runs(tmp_path)
    doc = json.loads(run("summarize", tmp_path, "--format", "json", "--merge").stdout)
    hosts = {r["rank"]: r["host"] for r in doc["ranks"]}
    assert hosts == {**{r: "node-a" for r in range(4)}, **{r: "node-b" for r in range(4, 8)}}, hosts
    assert any("renumbered" in w for w in doc["warnings"])


# ---------------------------------------------------------------------------- 9. teardown

_GROUPS_DIE = r"""
import gc, os, tempfile, weakref
import torch
import torch.distributed as dist
from nsyscomm.capture import wrapper as W
W.annotate(True)
W._push = lambda m: None
W._pop = lambda: None
fd, path = tempfile.mkstemp(); os.close(fd); os.unlink(path)
dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
sub = dist.new_group([0])
x = torch.ones(4)
dist.all_reduce(x)
dist.all_reduce(x, group=sub)
w = dist.all_reduce(x, group=sub, async_op=True); w.wait(); del w
out = torch.empty(4); dist.all_to_all_single(out, x, group=sub)
refs = [weakref.ref(dist.group.WORLD), weakref.ref(sub)]
del sub
dist.destroy_process_group()
gc.collect()
print("alive", sum(r() is not None for r in refs))
"""


def test_no_process_group_outlives_destroy_process_group():
    """The annotated job's process groups die when torch destroys them, as without nsyscomm:
    held by the wrapper's cache, a gloo group was destroyed at interpreter exit instead, where
    a rank could abort ("terminate called without an active exception")."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", _GROUPS_DIE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "0", out.stdout
