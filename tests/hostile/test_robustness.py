"""Hostile and broken inputs: every command either gives (partial) output, with a warning where
something was skipped, or a short error naming the file and the fix (exit 2). Never a traceback
(only with --debug), never an internal error (exit 3), and the inputs are never modified.

The corpus is built in a temporary folder from the bundled samples. Also: report strings never
reach SQL as text, and the capture wrapper never changes the program's behaviour.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.conftest import ROOT, SAMPLES, single_rank_gloo

DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"
FSDP = SAMPLES / "synthetic_fsdp_8rank.sqlite"
GLOO = SAMPLES / "synthetic_gloo_cpu.sqlite"
NODES = SAMPLES / "synthetic_nowrapper_2node"

# --------------------------------------------------------------------------- the corpus

ERROR = "error"  # exit 2 with a short message naming the input
PARTIAL = "partial"  # exit 0, with a warning saying what was skipped
OK = "ok"  # exit 0


def _sql(path: Path, *statements, params=()) -> None:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s, params) if params and "?" in s else con.execute(s)
    con.commit()
    con.close()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    return dst


def _drop_not_null(path: Path, table: str) -> None:
    """Rebuild a table without NOT NULL constraints, so that absurd NULLs can be planted."""
    _sql(
        path,
        f"CREATE TABLE tmp_copy AS SELECT * FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE tmp_copy RENAME TO {table}",
    )


def build_corpus(d: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (input path, expectation, text the warning or error must contain)."""
    c: dict[str, tuple[Path, str, str | None]] = {}
    (d / "empty.sqlite").write_bytes(b"")
    c["zero_byte"] = (d / "empty.sqlite", ERROR, "empty")
    (d / "random.sqlite").write_bytes(os.urandom(8192))
    c["random_bytes"] = (d / "random.sqlite", ERROR, "nsys export")
    (d / "random_magic.sqlite").write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    c["random_after_magic"] = (d / "random_magic.sqlite", ERROR, "export")
    (d / "truncated.sqlite").write_bytes(DDP.read_bytes()[:30000])
    c["truncated"] = (d / "truncated.sqlite", ERROR, "export")
    _sql(d / "other_app.sqlite", "CREATE TABLE users (id INTEGER, name TEXT)", "INSERT INTO users VALUES (1, 'a')")
    c["other_app_sqlite"] = (d / "other_app.sqlite", ERROR, "nsys")
    _sql(
        d / "no_tables.sqlite",
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)",
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2026.2.1')",
    )
    c["no_needed_tables"] = (d / "no_tables.sqlite", PARTIAL, "NVTX_EVENTS is absent")
    # a table name that is SQL: reaches SQL only as a parameter
    _sql(_copy(GLOO, d / "evil_table.sqlite"), 'CREATE TABLE "x""); DROP TABLE StringIds; --" (a)')
    c["evil_table_name"] = (d / "evil_table.sqlite", OK, None)
    (d / "empty_dir").mkdir()
    c["folder_without_reports"] = (d / "empty_dir", ERROR, "no report")
    c["missing_path"] = (d / "missing.sqlite", ERROR, "no such file")
    (d / "not_a_trace.json").write_text(json.dumps({"hello": "world", "rows": [1, 2, 3]}))
    c["json_not_a_trace"] = (d / "not_a_trace.json", ERROR, "not_a_trace.json")
    (d / "array.json").write_text('[1, 2, {"a": null}]')
    c["json_array"] = (d / "array.json", ERROR, "array.json")
    (d / "broken.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    c["json_truncated"] = (d / "broken.json", ERROR, "broken.json")
    (d / "corrupt.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(200))
    c["corrupt_gz"] = (d / "corrupt.json.gz", ERROR, "corrupt.json.gz")
    (d / "truncated.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode() * 50)[:40])
    c["truncated_gz"] = (d / "truncated.json.gz", ERROR, "truncated.json.gz")
    (d / "notes.txt").write_text("not a report")
    c["text_file"] = (d / "notes.txt", ERROR, "notes.txt")
    (d / "r.nsys-rep").write_bytes(b"\x00" * 64)
    c["nsys_rep_not_exported"] = (d / "r.nsys-rep", ERROR, "nsys export")

    # absurd values inside a real-looking report
    p = _copy(DDP, d / "end_before_start.sqlite")
    _sql(
        p,
        'UPDATE NVTX_EVENTS SET "end" = start - 5000 WHERE rowid % 3 = 0',
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 100 WHERE rowid % 4 = 0',
    )
    c["end_before_start"] = (p, OK, None)
    p = _copy(DDP, d / "null_timestamps.sqlite")
    _drop_not_null(p, "NVTX_EVENTS")
    _drop_not_null(p, "CUPTI_ACTIVITY_KIND_KERNEL")
    _drop_not_null(p, "CUPTI_ACTIVITY_KIND_RUNTIME")
    _sql(
        p,
        "UPDATE NVTX_EVENTS SET start = NULL WHERE rowid % 5 = 0",
        'UPDATE NVTX_EVENTS SET "end" = NULL, globalTid = NULL WHERE rowid % 7 = 0',
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL, "end" = NULL WHERE rowid % 6 = 0',
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = NULL, correlationId = NULL WHERE rowid % 4 = 0",
    )
    c["null_timestamps"] = (p, OK, None)
    p = _copy(DDP, d / "huge_strings.sqlite")
    big = "A" * (1 << 20)
    _sql(p, "UPDATE StringIds SET value = value || ? WHERE value LIKE 'nsyscomm:%' AND id % 2 = 0", params=(big,))
    _sql(p, "INSERT INTO StringIds VALUES ((SELECT max(id) + 1 FROM StringIds), ?)", params=("nccl:" + big,))
    c["one_mb_nvtx_strings"] = (p, OK, None)
    p = _copy(DDP, d / "non_utf8.sqlite")
    _sql(
        p,
        "UPDATE StringIds SET value = CAST(CAST(value AS BLOB) || x'fffe80c3' AS TEXT) "
        "WHERE value LIKE 'nsyscomm:%' AND id % 3 = 0",
        "UPDATE StringIds SET value = CAST(x'6e63636cff00fe' AS TEXT) WHERE id = (SELECT min(id) FROM StringIds)",
    )
    c["non_utf8_bytes"] = (p, "any", None)
    p = _copy(DDP, d / "sql_html.sqlite")
    _sql(
        p,
        "UPDATE StringIds SET value = replace(replace(value, 'caller=train.py', "
        "'caller=<script>alert(1)</script>''; DROP TABLE collectives; -- [bold red]'), "
        "'|pg=0|', '|pg=<img src=x onerror=alert(2)>[/]''\"|') WHERE value LIKE 'nsyscomm:%'",
        "UPDATE StringIds SET value = replace(value, 'host=', 'host=<b>''; DELETE FROM x; --') "
        "WHERE value LIKE 'nsyscomm.rank%'",
    )
    c["sql_and_html_strings"] = (p, OK, None)

    # one job, ranks duplicated or missing
    dup = d / "dup_ranks"
    dup.mkdir()
    _copy(DDP, dup / "a.sqlite")
    _copy(DDP, dup / "b.sqlite")
    # the same report twice: its ranks claimed twice, so not one job (--merge reads it)
    c["duplicate_ranks"] = (dup, ERROR, "not one job")
    p = _copy(FSDP, d / "missing_rank.sqlite")
    _sql(
        p,
        "DELETE FROM NVTX_EVENTS WHERE (globalTid >> 24) & 16777215 = "
        "(SELECT (globalTid >> 24) & 16777215 FROM NVTX_EVENTS WHERE globalTid IS NOT NULL "
        "ORDER BY globalTid DESC LIMIT 1)",
    )
    c["missing_rank"] = (p, PARTIAL, "fewer ranks than their group size")
    half = d / "half_job"
    half.mkdir()
    _copy(NODES / "node0.sqlite", half / "node0.sqlite")
    c["one_node_of_two"] = (half, PARTIAL, None)
    mixed = d / "mixed"
    mixed.mkdir()
    _copy(GLOO, mixed / "good.sqlite")
    (mixed / "bad.sqlite").write_bytes(b"")
    c["folder_with_one_bad_report"] = (mixed, ERROR, "bad.sqlite")
    return c


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    cases = build_corpus(d)
    base = tmp_path_factory.mktemp("baseline") / "baseline.json"
    r = CliRunner().invoke(main, ["baseline", str(DDP), "-o", str(base)])
    assert r.exit_code == 0, r.output
    return d, cases, base


def _snapshot(d: Path) -> dict:
    """Every file and folder under d: content hash and mtime (a folder: its listing)."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.stat()
        if p.is_file():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_size)
        else:
            out[str(p)] = (tuple(sorted(x.name for x in p.iterdir())), st.st_mtime_ns)
    return out


def _commands(inp: Path, out: Path, base: Path) -> list[list[str]]:
    i = str(inp)
    cmds = [["summarize", i, "--format", f] for f in ("text", "markdown", "csv", "json")]
    cmds += [
        ["summarize", i, "--by", "caller", "--format", "json"],
        ["trace", i, "-o", str(out / "t.json"), "--per-rank", str(out / "pr")],
        ["report", i, "-o", str(out / "r.html")],
        ["gate", i, "-b", str(base), "--no-step-summary", "--min-calls", "0"],
        ["gate", str(DDP), "-b", i, "--no-step-summary"],
        ["baseline", i, "-o", str(out / "b.json")],
    ]
    return cmds


CASES = [
    "zero_byte",
    "random_bytes",
    "random_after_magic",
    "truncated",
    "other_app_sqlite",
    "no_needed_tables",
    "evil_table_name",
    "folder_without_reports",
    "missing_path",
    "json_not_a_trace",
    "json_array",
    "json_truncated",
    "corrupt_gz",
    "truncated_gz",
    "text_file",
    "nsys_rep_not_exported",
    "end_before_start",
    "null_timestamps",
    "one_mb_nvtx_strings",
    "non_utf8_bytes",
    "sql_and_html_strings",
    "duplicate_ranks",
    "missing_rank",
    "one_node_of_two",
    "folder_with_one_bad_report",
]


def test_corpus_lists_every_case(corpus):
    assert sorted(corpus[1]) == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_every_command_on_hostile_input(corpus, tmp_path, case):
    d, cases, base = corpus
    inp, expect, needle = cases[case]
    before = _snapshot(d)
    codes = []
    for args in _commands(inp, tmp_path, base):
        r = CliRunner().invoke(main, args)
        out = r.output
        where = f"{case}: nsyscomm {' '.join(args)}\n{out[-2000:]}"
        assert not (r.exception and not isinstance(r.exception, SystemExit)), f"{where}\n{r.exception!r}"
        assert "Traceback" not in out, where
        assert r.exit_code != 3 and "internal error" not in out, where
        gating = args[0] == "gate"
        assert r.exit_code in ((0, 1, 2) if gating else (0, 2)), where
        if r.exit_code == 2:
            lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
            assert 1 <= len(lines) <= 3 and lines[0].startswith("nsyscomm: error:"), where
            named = inp.name in r.stderr or (inp.is_dir() and any(p.name in r.stderr for p in inp.iterdir()))
            assert named or (gating and args[1] == str(DDP) and "baseline" in r.stderr), where
        codes.append((args[0], r.exit_code, r.output))
        # inputs untouched: same bytes, same mtimes, nothing written beside them
        assert _snapshot(d) == before, where
    summarize = [(c, o) for cmd, c, o in codes if cmd == "summarize"]
    if expect == ERROR:
        assert all(c == 2 for c, _ in summarize), (case, summarize)
        if needle:
            assert all(needle in o for _, o in summarize), (case, needle, summarize[0][1])
    elif expect in (OK, PARTIAL):
        assert all(c == 0 for c, _ in summarize), (case, summarize[0][1][-2000:])
        if needle:
            assert all(needle in o for _, o in summarize), (case, needle, summarize[0][1][-2000:])
    else:  # "any": a clean error or output, consistent across formats
        assert len({c for c, _ in summarize}) == 1, (case, summarize)


def test_partial_json_carries_warnings(corpus):
    d, cases, _ = corpus
    for case in ("no_needed_tables", "missing_rank"):
        r = CliRunner().invoke(main, ["summarize", str(cases[case][0]), "--format", "json"])
        doc = json.loads(r.stdout)
        assert doc["schema"] == 3 and doc["warnings"], case


def test_absurd_values_do_not_produce_negative_or_nan_figures(corpus):
    d, cases, _ = corpus
    for case in ("end_before_start", "null_timestamps"):
        doc = json.loads(CliRunner().invoke(main, ["summarize", str(cases[case][0]), "--format", "json"]).stdout)
        for row in doc["summary"]:
            for k in ("count", "calls", "bytes"):
                assert row[k] is None or row[k] >= 0, (case, row)


def test_sql_and_html_strings_are_data(corpus, tmp_path):
    d, cases, _ = corpus
    inp = str(cases["sql_and_html_strings"][0])
    md = CliRunner().invoke(main, ["summarize", inp, "--format", "markdown", "--by", "caller"]).output
    assert "<script>" not in md and "&lt;script&gt;" in md
    js = json.loads(CliRunner().invoke(main, ["summarize", inp, "--format", "json", "--by", "caller"]).stdout)
    assert any("DROP TABLE collectives" in (r["caller"] or "") for r in js["summary"])
    page = tmp_path / "r.html"
    assert CliRunner().invoke(main, ["report", inp, "-o", str(page)]).exit_code == 0
    html = page.read_text()
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    text = CliRunner().invoke(main, ["summarize", inp, "--by", "caller"]).output
    assert "[bold red]" in text  # shown literally, not interpreted as rich markup
    gate = (
        CliRunner()
        .invoke(
            main,
            [
                "gate",
                inp,
                "-b",
                inp,
                "--format",
                "markdown",
                "--show",
                "all",
                "--by",
                "caller",
                "--min-calls",
                "0",
                "--no-step-summary",
            ],
        )
        .stdout
    )
    assert "DROP TABLE collectives" in gate
    # code spans show HTML literally; outside them, no raw HTML
    import re

    outside = re.sub(r"`[^`\n]*`", "", gate)
    assert "<script>" not in outside and "<img" not in outside, outside


@pytest.mark.parametrize("cmd", ["summarize", "trace", "report", "gate", "baseline"])
def test_debug_shows_a_traceback(corpus, tmp_path, cmd):
    d, cases, base = corpus
    inp = str(cases["corrupt_gz"][0])
    extra = {
        "trace": ["-o", str(tmp_path / "t.json")],
        "report": ["-o", str(tmp_path / "r.html")],
        "gate": ["-b", str(base)],
        "baseline": [],
        "summarize": [],
    }[cmd]
    r = CliRunner().invoke(main, [cmd, inp, *extra, "--debug"])
    assert r.exit_code == 2 and "Traceback" in r.output, r.output


def test_sqlite_is_opened_read_only(corpus, tmp_path):
    """A read-only copy (file and folder) reads fine: nothing is opened for writing, no journal."""
    src = tmp_path / "ro"
    src.mkdir()
    f = _copy(DDP, src / "r.sqlite")
    os.chmod(f, 0o444)
    os.chmod(src, 0o555)
    try:
        r = CliRunner().invoke(main, ["summarize", str(f), "--format", "json"])
        assert r.exit_code == 0, r.output
        assert sorted(x.name for x in src.iterdir()) == ["r.sqlite"]
    finally:
        os.chmod(src, 0o755)
        os.chmod(f, 0o644)


# --------------------------------------------------------------------------- SQL text audit


def test_no_report_string_is_formatted_into_sql():
    """Audit: f-strings that build SQL interpolate only constants, column lists, SQL files, table
    names from a fixed list and the quoted input path; report-derived values go in as parameters."""
    import re

    root = ROOT / "nsyscomm"
    # placeholders known to hold constants / code-built SQL (each checked when it was added)
    allowed = {
        "_col(k, 'globalPid')",
        "duck.sql('nccl_kernels')",
        "duck.sql('collectives')",
        "duck.sql('calls_ranked')",
        "duck.sql('call_spans')",
        "duck.sql('logical_collectives')",
        "duck.sql('setup_calls')",
        "duck.sql('first_meetings')",
        "duck.sql('rank_spans')",
        "duck.sql('compute_kernels')",
        "duck.sql('compute_islands')",
        "duck.sql('hang_maybe')",
        "_sqlite_extension()",
        "quoted",
        "name",
        "select",
        "sets",
        "t",
        "like_str",
        "like_text",
        "text_id",
        "name_expr",
        "join",
        "bin_expr",
        "json_expr",
        "dom_filter",
        "table",
        "cols",
        "c",
        "p",
        "where",
        "like",
        "type_sel",
        "device",
        "partition",
        "on_type",
        "values",  # ingest/nsys/reader._scan: "(?, ?, ?)" placeholders, one per span
        "function",  # ingest/nsys/scan_arrow.rows_sql: a row function of _sqlite_scan.c, fixed names
        "_UNPARSED",  # ingest/nsys/reader: NULL columns named after MESSAGE_FIELDS
        # ingest/limits.cut_sql of a constant column: a CASE cutting it to the name bound
        "limits.cut_sql('value')",
        "limits.cut_sql('e.text')",
        "limits.cut_sql('s.value')",
        # ingest/nsys/arrow: table and column names from the export, quoted with double
        # quotes doubled; the table names of to_sqlite come from a fixed list
        "q",
        "_sqlite_columns(table.schema)",
        "decl",
        "marks",
    }
    sql_start = re.compile(r"^\s*(SELECT|CREATE|UPDATE|ATTACH|PRAGMA|INSERT|DELETE|WITH|LOAD)\b", re.I)
    bad = []
    for py in root.rglob("*.py"):
        if "synth" in py.relative_to(root).parts:  # writes the synthetic samples, reads no report
            continue
        text = py.read_text()
        for m in re.finditer(r'\bf("""|\'\'\'|"|\')(.*?)\1', text, re.S):
            body = m.group(2)
            if not sql_start.search(body):
                continue
            for ph in re.findall(r"(?<!\{)\{([^{}]+)\}(?!\})", body):
                # the formatter may turn 'x' into "x": compare with one kind of quote
                key = ph.split("!")[0].split(":")[0].strip().replace('"', "'")
                if key not in allowed:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{py.relative_to(root)}:{line}: {{{ph}}} in {body.strip()[:80]!r}")
    assert not bad, "SQL built from values (use parameters):\n" + "\n".join(bad)


# --------------------------------------------------------------------------- the capture wrapper

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pg():
    yield from single_rank_gloo()


class _Boom(Exception):
    pass


def _wrap(fn, api="all_reduce"):
    from nsyscomm.capture import python_layer
    from nsyscomm.capture.api_specs import C10D_SPECS

    op, rule, ti, tk, gi, gk, ai, extra = C10D_SPECS[api]
    return python_layer.make_wrapper(fn, api, op, rule, ti, tk, gi, gk, ai, **extra)


@pytest.fixture
def annotated(pg, monkeypatch):
    from nsyscomm.capture import wrapper as W

    W.annotate(True)
    W._reset_for_tests()
    events = []
    monkeypatch.setattr(W, "_push", lambda m: events.append(("push", m)))
    monkeypatch.setattr(W, "_pop", lambda: events.append(("pop", None)))
    monkeypatch.setattr(W, "_mark", lambda m: None)
    yield events
    W.annotate(False)


def test_collective_exception_is_reraised_unchanged(annotated):
    import traceback

    err = _Boom("the collective failed")

    def failing(tensor, op=None, group=None, async_op=False):
        raise err

    w = _wrap(failing)
    with pytest.raises(_Boom) as info:
        w(torch.ones(3))
    assert info.value is err and info.value.__cause__ is None and info.value.__context__ is None
    assert traceback.extract_tb(info.tb)[-1].name == "failing"
    assert [e[0] for e in annotated] == ["push", "pop"]  # the range is closed anyway


def test_base_exceptions_pass_through(annotated):
    def interrupted(tensor, op=None, group=None, async_op=False):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _wrap(interrupted)(torch.ones(3))
    assert [e[0] for e in annotated] == ["push", "pop"]


@pytest.mark.parametrize("where", ["message", "push", "pop", "all"])
def test_annotation_errors_never_change_the_result(annotated, monkeypatch, where):
    from nsyscomm.capture import wrapper as W

    def broken(*a, **k):
        raise RuntimeError("annotation broken")

    if where in ("push", "all"):
        monkeypatch.setattr(W, "_push", broken)
    if where in ("pop", "all"):
        monkeypatch.setattr(W, "_pop", broken)
    if where in ("message", "all"):
        monkeypatch.setattr(W, "_caller", broken)
    W._warned.clear()
    ret = object()
    seen = []

    def ok(tensor, op=None, group=None, async_op=False):
        seen.append(tensor)
        return ret

    t = torch.ones(2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # even with warnings as errors (python -W error)
        assert _wrap(ok)(t) is ret
        assert _wrap(ok)(t, async_op=True) is ret
    assert seen == [t, t]

    err = _Boom("x")

    def failing(tensor, op=None, group=None, async_op=False):
        raise err

    with pytest.raises(_Boom) as info:
        _wrap(failing)(t)
    assert info.value is err


def test_annotated_real_collective_same_results_and_errors(annotated):
    import torch.distributed as dist

    t = torch.arange(4.0)
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(4.0))
    with pytest.raises(Exception) as wrapped:
        dist.broadcast(torch.ones(2), src=7)
    from nsyscomm.capture import wrapper as W

    W.annotate(False)
    with pytest.raises(Exception) as plain:
        dist.broadcast(torch.ones(2), src=7)
    assert type(wrapped.value) is type(plain.value) and str(wrapped.value) == str(plain.value)
