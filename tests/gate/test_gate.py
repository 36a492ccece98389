"""The CI gate: exit status 0 pass / 1 regression / 2 unusable input, thresholds, noise bands, renderers."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from nsyscomm import api
from nsyscomm import gate as g
from nsyscomm.commands.gate import baseline as baseline_cmd
from nsyscomm.commands.gate import gate as gate_cmd
from nsyscomm.errors import InputError
from nsyscomm.views import gate_out
from tests.conftest import SAMPLES, real_nsys_files

REAL = real_nsys_files()
SAMPLE_INPUTS = (
    sorted(
        [p for p in SAMPLES.glob("*.sqlite")]
        + [p for p in SAMPLES.iterdir() if p.is_dir() and list(p.glob("*.sqlite"))]
    )
    if SAMPLES.exists()
    else []
)
H100 = next((p for p in REAL if "nccl_window" in p.name and "nonccl" not in p.name and p.exists()), None)
DDP = SAMPLES / "synthetic_ddp_4rank.sqlite"


@cache
def _doc_of(path: str) -> str:
    return json.dumps(g.load_runs(api.gate_sources([path]))[0].doc)


def doc_of(path) -> dict:
    """The run document of a report (cached: each report is read once per test session)."""
    return json.loads(_doc_of(str(path)))


def run_gate(*args, env=None):
    return CliRunner().invoke(gate_cmd, [str(a) for a in args] + ["--no-pyproject"], env=env)


def write(tmp_path, name, obj) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return p


def row(op="all_reduce", nbytes=25 * 2**20, n=4, calls=40, avg=0.45, p50=None, busbw=None, caller=None, **kw):
    count = calls // n
    bus = busbw if busbw is not None else (nbytes / (avg * 1e6) * 2 * (n - 1) / n if nbytes else None)
    r = {
        "op": op,
        "bytes": nbytes,
        "count": count,
        "calls": calls,
        "ranks": n,
        "total_ms": avg * count,
        "avg_ms": avg,
        "p50_ms": p50 if p50 is not None else avg,
        "max_ms": avg * 1.2,
        "algbw_GBps": nbytes / (avg * 1e6) if nbytes else None,
        "busbw_GBps": bus,
        "group_size": n,
        "dtype": "float32",
        "caller": caller,
    }
    r.update(kw)
    return r


def doc(rows, comm=(10.0, 10.0), wait=(1.0, 1.0), delay=(0.01, 0.01), **extra) -> dict:
    d = {
        "schema": 3,
        "tool": "nsyscomm",
        "reports": ["x.sqlite"],
        "summary": rows,
        "ranks": [
            {"rank": i, "host": "h", "calls": 10, "comm_ms": c, "wait_ms": w, "elapsed_ms": 100.0, "comm_pct": c}
            for i, (c, w) in enumerate(zip(comm, wait))
        ],
        "skew": {
            "straggler_rank": 1,
            "instances": 10,
            "per_rank": [
                {"rank": i, "late_count": i, "avg_arrival_delay_ms": x, "wait_ms": w}
                for i, (x, w) in enumerate(zip(delay, wait))
            ],
        },
        "warnings": [],
    }
    d.update(extra)
    return d


def faster(d: dict, factor: float = 2.0) -> dict:
    """The same job, `factor` times faster: what a baseline of a better commit looks like."""
    d = copy.deepcopy(d)
    for r in d["summary"] + d.get("summary_by_caller", []):
        for k in ("total_ms", "avg_ms", "p50_ms", "min_ms", "max_ms"):
            if r.get(k) is not None:
                r[k] /= factor
        for k in ("algbw_GBps", "busbw_GBps"):
            if r.get(k) is not None:
                r[k] *= factor
    for r in d.get("ranks", []):
        for k in ("comm_ms", "wait_ms"):
            if r.get(k) is not None:
                r[k] /= factor
    return d


# ----------------------------------------------------------------------------- real reports


@pytest.mark.parametrize("path", REAL + SAMPLE_INPUTS, ids=[p.name for p in REAL + SAMPLE_INPUTS])
def test_report_passes_against_itself(tmp_path, path):
    base = write(tmp_path, "baseline.json", doc_of(path))
    r = run_gate("--baseline", base, path, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "pass" and out["exit_code"] == 0
    assert not any(i["fails"] for i in out["items"])


@pytest.mark.skipif(H100 is None, reason="real 2xH100 export not present")
def test_real_report_against_twice_as_fast_baseline_fails_naming_op(tmp_path):
    base = write(tmp_path, "baseline.json", faster(doc_of(H100)))
    r = run_gate("-b", base, H100)
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.stdout and "all_to_all" in r.stdout
    assert "avg latency" in r.stdout and "+100.0%" in r.stdout
    # no bytes in this report (no wrapper): the key still compares, on latency alone
    r = run_gate("-b", base, H100, "--format", "json")
    bad = [i for i in json.loads(r.stdout)["items"] if i["fails"] and i["scope"] == "key"]
    assert [i["key"]["op"] for i in bad] == ["all_to_all"] and bad[0]["key"]["bytes"] is None
    metrics = {c["metric"] for c in bad[0]["comparisons"] if c["status"] == "regression"}
    assert {"key.avg_ms", "key.p50_ms"} <= metrics and "key.busbw_GBps" not in metrics


@pytest.mark.skipif(not DDP.exists(), reason="sample reports not generated")
def test_sample_against_twice_as_fast_baseline_names_op_and_size(tmp_path):
    base = write(tmp_path, "baseline.json", faster(doc_of(DDP)))
    r = run_gate("-b", base, DDP, "--format", "markdown")
    assert r.exit_code == 1
    assert "all_reduce 25.0 MB n=4" in r.stdout and "bus bandwidth" in r.stdout and "-50.0%" in r.stdout
    # the 1-call broadcast is below min_calls: reported, never failing
    r = run_gate("-b", base, DDP, "--format", "json")
    items = {i["name"]: i for i in json.loads(r.stdout)["items"]}
    bc = next(v for k, v in items.items() if k.startswith("broadcast"))
    assert not bc["fails"] and bc["status"] == "few_calls"


@pytest.mark.skipif(not DDP.exists(), reason="sample reports not generated")
def test_baseline_command_and_multi_run_baseline(tmp_path):
    out = tmp_path / "b.json"
    r = CliRunner().invoke(baseline_cmd, [str(DDP), "-o", str(out), "--label", "abc123"])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert d["schema"] == 3 and d["kind"] == "baseline" and len(d["runs"]) == 1
    assert d["runs"][0]["label"] == "abc123" and d["runs"][0]["summary_by_caller"]
    summ = write(tmp_path, "s.json", doc_of(DDP))
    for _ in range(3):
        r = CliRunner().invoke(baseline_cmd, [str(summ), "-o", str(out), "--append", "--keep", "3"])
        assert r.exit_code == 0, r.output
    assert len(json.loads(out.read_text())["runs"]) == 3
    r = run_gate("-b", out, DDP)
    assert r.exit_code == 0, r.output
    assert "3 baseline run(s)" in r.stdout
    assert "per op, size, group size, caller" in r.stdout


# ------------------------------------------------------------------------------ noise bands


def _runs(*avgs, calls=40):
    return [doc([row(avg=a, calls=calls)]) for a in avgs]


def test_noise_inside_band_passes_and_outside_fails(tmp_path):
    base = write(tmp_path, "b.json", {"schema": 3, "runs": _runs(0.40, 0.45, 0.52)})
    inside = write(tmp_path, "c1.json", doc([row(avg=0.51)]))  # +13% vs median, inside [0.40, 0.52]
    outside = write(tmp_path, "c2.json", doc([row(avg=0.60)]))  # +33%, beyond the band
    r = run_gate("-b", base, inside, "--format", "json")
    assert r.exit_code == 0, r.output
    key = next(i for i in json.loads(r.stdout)["items"] if i["scope"] == "key")
    avg = next(c for c in key["comparisons"] if c["metric"] == "key.avg_ms")
    assert avg["status"] == "noise" and avg["band"] == [0.40, 0.52]
    assert run_gate("-b", base, outside).exit_code == 1
    # the same runs as repeated --baseline files
    files = [write(tmp_path, f"r{i}.json", d) for i, d in enumerate(_runs(0.40, 0.45, 0.52))]
    assert run_gate(*sum((["-b", f] for f in files), []), inside).exit_code == 0
    assert run_gate(*sum((["-b", f] for f in files), []), outside).exit_code == 1
    # a single baseline has no band: +13% fails
    assert run_gate("-b", files[1], inside).exit_code == 1


def test_noise_sigma_widens_the_band():
    runs = [g.run_from_doc(d, f"r{i}") for i, d in enumerate(_runs(0.40, 0.45, 0.50))]
    cur = g.run_from_doc(doc([row(avg=0.53)]), "cur")
    assert g.compare(runs, cur).exit_code == 1
    wide = g.override(g.Settings(), noise_sigma=1.0)
    assert g.compare(runs, cur, wide).exit_code == 0


# ------------------------------------------------------------------------------- thresholds


def test_absolute_floor_and_min_calls():
    tiny = lambda avg, calls=40: g.run_from_doc(doc([row(op="all_reduce", nbytes=8, avg=avg, calls=calls)]), "x")
    # 3 us -> 6 us: +100% but below the 10 us floor of key.avg_ms
    assert g.compare([tiny(0.003)], tiny(0.006)).exit_code == 0
    assert (
        g.compare([tiny(0.003)], tiny(0.006), g.override(g.Settings(), abs_=["avg_ms=0.001", "p50_ms=0.001"])).exit_code
        == 1
    )
    # a few noisy calls never fail a build
    v = g.compare([tiny(0.1, calls=4)], tiny(0.5, calls=4))
    assert v.items[0].status == "few_calls" and not v.items[0].fails
    assert [i.name for i in v.failing] == ["job totals"]  # the job's total latency still counts (+1.6 ms)
    no_job = g.override(g.Settings(), ignore=["job"])
    assert g.compare([tiny(0.1, calls=4)], tiny(0.5, calls=4), no_job).exit_code == 0
    assert g.compare([tiny(0.1, calls=4)], tiny(0.5, calls=4), g.override(no_job, min_calls=2)).exit_code == 1


def test_relative_threshold_options_and_ignore():
    b = g.run_from_doc(doc([row(avg=0.40)]), "b")
    c = g.run_from_doc(doc([row(avg=0.46)]), "c")  # +15%
    assert g.compare([b], c).exit_code == 1
    assert g.compare([b], c, g.override(g.Settings(), rel=["20"])).exit_code == 0
    assert (
        g.compare([b], c, g.override(g.Settings(), rel=["key.avg_ms=20", "p50_ms=20", "busbw_GBps=20"])).failing[0].name
        == "job totals"
    )
    assert (
        g.compare(
            [b], c, g.override(g.Settings(), rel=["key.avg_ms=20", "p50_ms=20", "busbw_GBps=20", "total_ms=20"])
        ).exit_code
        == 0
    )
    assert g.compare([b], c, g.override(g.Settings(), ignore=["key"])).exit_code == 1  # the job total
    assert g.compare([b], c, g.override(g.Settings(), ignore=["key", "job.total_ms"])).exit_code == 0
    with pytest.raises(InputError, match="unknown metric"):
        g.override(g.Settings(), rel=["nonsense=3"])
    with pytest.raises(InputError, match="name the metric"):
        g.override(g.Settings(), abs_=["3"])


def test_pyproject_and_toml_config(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname='x'\n[tool.nsyscomm.gate]\nmin_calls = 2\nnew_keys = 'warn'\nignore = ['job']\n"
        "[tool.nsyscomm.gate.key.avg_ms]\nrel = 50\nabs = 0.5\n[tool.nsyscomm.gate.key]\np50_ms = 50\n"
        "busbw_GBps = { rel = 50, fail = false }\n"
    )
    monkeypatch.chdir(tmp_path)
    s = g.settings_from()
    assert s.min_calls == 2 and s.new_keys == "warn" and not s.thresholds["job.total_ms"].enabled
    assert s.thresholds["key.avg_ms"] == g.Threshold(50, 0.5, True, True)
    assert s.thresholds["key.p50_ms"].rel == 50 and s.thresholds["key.busbw_GBps"].fail is False
    base = write(tmp_path, "b.json", doc([row(avg=0.40)]))
    cur = write(tmp_path, "c.json", doc([row(avg=0.50)]))
    runner = CliRunner()
    assert runner.invoke(gate_cmd, ["-b", str(base), str(cur)]).exit_code == 0  # pyproject: 50%
    assert runner.invoke(gate_cmd, ["-b", str(base), str(cur), "--no-pyproject"]).exit_code == 1
    cfg = write(tmp_path, "gate.toml", "[gate]\nrel = 1\n")  # a file overrides it
    assert runner.invoke(gate_cmd, ["-b", str(base), str(cur), "--config", str(cfg)]).exit_code == 1
    bad = write(tmp_path, "bad.toml", "[gate]\nmin_cals = 3\n")
    r = runner.invoke(gate_cmd, ["-b", str(base), str(cur), "--config", str(bad)])
    assert r.exit_code == 2 and "min_cals" in r.stderr


# ------------------------------------------------------------------------ keys come and go


def test_new_and_missing_keys_policies(tmp_path):
    base = write(tmp_path, "b.json", doc([row(nbytes=25 * 2**20)]))
    # a smaller bucket: the 25 MB all_reduce vanishes, 5 MB ones appear (more calls)
    cur = write(tmp_path, "c.json", doc([row(nbytes=5 * 2**20, calls=200, avg=0.1)]))
    r = run_gate("-b", base, cur)
    assert r.exit_code == 1 and "5.0 MB" in r.stdout and "new" in r.stdout and "missing" in r.stdout
    # the job's totals see it too: 5x the calls, +11% collective latency
    r = run_gate("-b", base, cur, "--new-keys", "warn", "--format", "json")
    failing = [i for i in json.loads(r.stdout)["items"] if i["fails"]]
    assert r.exit_code == 1 and [i["name"] for i in failing] == ["job totals"]
    assert {c["metric"] for c in failing[0]["comparisons"] if c["status"] == "regression"} == {
        "job.calls",
        "job.total_ms",
    }
    assert run_gate("-b", base, cur, "--new-keys", "warn", "--ignore", "job").exit_code == 0
    assert run_gate("-b", base, cur, "--new-keys", "ignore", "--ignore", "job").exit_code == 0
    assert run_gate("-b", base, cur, "--new-keys", "warn", "--missing-keys", "fail", "--ignore", "job").exit_code == 1


def test_caller_level_when_both_sides_have_callers():
    rows = [row(caller="a.py:1 f", calls=40, avg=0.4), row(caller="b.py:2 g", calls=40, avg=0.4)]
    slow = [row(caller="a.py:1 f", calls=40, avg=0.4), row(caller="b.py:2 g", calls=40, avg=0.8)]
    b, c = g.run_from_doc(doc(rows), "b"), g.run_from_doc(doc(slow), "c")
    v = g.compare([b], c)
    assert v.level == "caller" and [i.key.caller for i in v.failing if i.scope == "key"] == [
        "b.py g"
    ]  # no line: docs/gate.md
    # the current side per op only: the baseline's caller rows are aggregated to (op, bytes, n)
    c_op = g.run_from_doc(doc([row(calls=80, avg=0.6)]), "c")
    v = g.compare([b], c_op)
    assert v.level == "op"
    key = next(i for i in v.items if i.scope == "key")
    assert key.status == "regression" and key.baseline_calls == 80
    assert next(c for c in key.comparisons if c.metric == "key.avg_ms").baseline == pytest.approx(0.4)


def test_a_new_metric_compares_only_when_both_sides_have_it():
    ov = lambda x: {"per_rank": [{"rank": 0, "exposed_ms": x}, {"rank": 1, "exposed_ms": x}], "per_step": []}
    b = g.run_from_doc(doc([row()], overlap=ov(2.0)), "b")
    assert g.compare([b], g.run_from_doc(doc([row()], overlap=ov(4.0)), "c")).exit_code == 1
    assert g.compare([b], g.run_from_doc(doc([row()]), "c")).exit_code == 0  # no overlap section
    # a per-key field of the future (e.g. exposed_ms in summary rows)
    b = g.run_from_doc(doc([row(exposed_ms=1.0)]), "b")
    assert g.compare([b], g.run_from_doc(doc([row(exposed_ms=3.0)]), "c")).exit_code == 1
    assert g.compare([b], g.run_from_doc(doc([row()]), "c")).exit_code == 0


def test_new_straggler_fails_and_is_noted():
    b = g.run_from_doc(doc([row()], wait=(1.0, 1.0), delay=(0.01, 0.01)), "b")
    c = g.run_from_doc(doc([row()], wait=(4.0, 0.2), delay=(0.01, 0.8), skew=None), "c")
    c.doc["skew"] = {
        "straggler_rank": 0,
        "instances": 10,
        "per_rank": [
            {"rank": 0, "late_count": 9, "avg_arrival_delay_ms": 0.8, "wait_ms": 0.2},
            {"rank": 1, "late_count": 1, "avg_arrival_delay_ms": 0.01, "wait_ms": 4.0},
        ],
    }
    v = g.compare([b], c)
    assert v.exit_code == 1
    assert any("straggler changed" in n for n in v.notes)
    assert {i.name for i in v.failing} >= {"job totals"}


# -------------------------------------------------------------------------- unusable input

BROKEN = {
    "missing.json": None,
    "empty.json": "",
    "garbage.json": "{not json",
    "list.json": "[1, 2]",
    "noschema.json": json.dumps({"summary": []}),
    "schema9.json": json.dumps({"schema": 9, "summary": []}),
    "schemastr.json": json.dumps({"schema": "1", "summary": []}),
    "schema2.json": json.dumps({"schema": 2, "summary": []}),
    "nosummary.json": json.dumps({"schema": 3}),
    "badrows.json": json.dumps({"schema": 3, "summary": [{"bytes": 3}]}),
    "badruns.json": json.dumps({"schema": 3, "runs": []}),
    "badrun.json": json.dumps({"schema": 3, "runs": [{"schema": 7, "summary": []}]}),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_baseline_exits_2_naming_file(tmp_path, name):
    p = tmp_path / name
    if BROKEN[name] is not None:
        p.write_text(BROKEN[name])
    cur = write(tmp_path, "cur.json", doc([row()]))
    r = run_gate("-b", p, cur)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and lines[0].startswith("nsyscomm: error:")
    assert "Traceback" not in r.output


def test_schema_2_baseline_is_refused_with_the_command_that_records_it_again(tmp_path):
    """Schema 3 changed what latency, lateness and wait mean (queue time out of latency, a delay
    counted once): a schema-2 baseline holds figures of another kind, so it is refused."""
    old = write(tmp_path, "old.json", {**doc([row()]), "schema": 2})
    r = run_gate("-b", old, write(tmp_path, "cur.json", doc([row()])))
    assert r.exit_code == 2
    assert '"schema": 2' in r.stderr and "nsyscomm baseline --output" in r.stderr


def test_unreadable_current_exits_2(tmp_path):
    base = write(tmp_path, "b.json", doc([row()]))
    bogus = tmp_path / "run.sqlite"
    bogus.write_bytes(b"this is not sqlite at all" * 10)
    for cur in (bogus, tmp_path / "nothere.sqlite", tmp_path):  # garbage, absent, folder without reports
        r = run_gate("-b", base, cur)
        assert r.exit_code == 2, (cur, r.output)
        assert len(r.stderr.strip().splitlines()) == 1
    # no collectives at all in the run while the baseline has some: a failed capture, not a pass
    empty = write(tmp_path, "empty.json", doc([]))
    r = run_gate("-b", base, empty)
    assert r.exit_code == 2 and "no collective calls" in r.stderr
    # two JSON runs given as the current side
    r = run_gate("-b", base, base, empty)
    assert r.exit_code == 2


def test_internal_error_is_not_a_regression(tmp_path, monkeypatch):
    base = write(tmp_path, "b.json", doc([row()]))

    def boom(*a, **k):
        raise RuntimeError("bug")

    import nsyscomm.gate

    monkeypatch.setattr(nsyscomm.gate, "compare", boom)  # where `nsyscomm gate` looks it up
    r = run_gate("-b", base, base)
    assert r.exit_code == 3 and "internal error" in r.stderr


# ------------------------------------------------------------------------------- renderers


def test_junit_markdown_json_and_step_summary(tmp_path):
    base = write(tmp_path, "b.json", doc([row(), row(op="all_gather", nbytes=2**20, avg=0.05)]))
    cur = write(tmp_path, "c.json", doc([row(avg=0.9), row(op="all_gather", nbytes=2**20, avg=0.05)]))
    junit, summary = tmp_path / "gate.xml", tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    r = run_gate("-b", base, cur, "--junit", junit, "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["schema"] == 3 and out["kind"] == "gate" and out["status"] == "fail"
    cases = ET.parse(junit).getroot().findall(".//testcase")
    keys = [c for c in cases if c.get("classname").startswith("nsyscomm.gate.all")]
    assert len(keys) == 2
    failed = [c for c in cases if c.find("failure") is not None]
    assert any("all_reduce 25.0 MB" in c.get("name") for c in failed)
    assert not any("all_gather" in c.get("name") for c in failed)
    md = summary.read_text()
    assert md.startswith("earlier step\n") and "❌" in md and "| " in md and "all_reduce 25.0 MB" in md
    r = run_gate("-b", base, cur, "--no-step-summary", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text() == md
    assert "all_reduce 25.0 MB n=4" in r.stdout and "avg latency" in r.stdout


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    avgs=st.lists(st.floats(0.02, 50.0), min_size=1, max_size=4), calls=st.integers(0, 500), factor=st.floats(0.2, 5.0)
)
def test_properties_self_pass_and_slowdown_direction(avgs, calls, factor):
    d = doc([row(avg=a, nbytes=(i + 1) * 2**20, calls=calls) for i, a in enumerate(avgs)])
    run = g.run_from_doc(d, "r")
    assert g.compare([run], g.run_from_doc(copy.deepcopy(d), "c")).exit_code == 0
    slower = g.run_from_doc(faster(d, 1 / factor), "c")  # every latency x factor
    v = g.compare([run], slower)
    if factor <= 1.0 or calls < 10:
        assert not any(i.fails for i in v.items if i.scope == "key")
    elif factor > 1.2 and max(avgs) * (factor - 1) > 0.011:
        assert v.exit_code == 1
    assert gate_out.render_markdown(v) and gate_out.render_junit(v) and json.loads(gate_out.render_json(v))


@pytest.mark.skipif(not DDP.exists(), reason="sample reports not generated")
@pytest.mark.parametrize("by_caller", [False, True], ids=["by-op", "by-caller"])
def test_summarize_json_is_a_baseline(tmp_path, by_caller):
    """The documented workflow: nsyscomm summarize run.sqlite --format json > baseline.json."""
    from nsyscomm.api import load
    from nsyscomm.views.json_out import dumps

    base = tmp_path / "baseline.json"
    base.write_text(dumps(load([DDP]), by_caller))
    r = run_gate("-b", base, DDP, "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["level"] == ("caller" if by_caller else "op")
    # and the summary JSON works as the current side too
    assert run_gate("-b", base, base).exit_code == 0


def test_many_ranks_are_cut_to_the_worst():
    n = 20
    b = g.run_from_doc(doc([row()], comm=[10.0] * n, wait=[1.0] * n, delay=[0.01] * n), "b")
    c = g.run_from_doc(doc([row()], comm=[10.0 + i for i in range(n)], wait=[1.0] * n, delay=[0.01] * n), "c")
    v = g.compare([b], c)
    shown = gate_out.rows(v, max_ranks=3)
    ranks = [r["item"] for r in shown if r["item"].startswith("rank ")]
    assert sorted(set(ranks)) == ["rank 17", "rank 18", "rank 19"]
    more = [r for r in shown if r["item"].startswith("...")]
    assert (
        len(more) == 1
        and more[0]["item"] == f"... {sum(1 for i in v.items if i.scope == 'rank' and i.changed) - 3} more rank(s)"
    )
    assert shown.index(more[0]) == len(shown) - 1 - sum(1 for r in shown if r["item"] == "job totals")
    # rank rows: comm time and arrival delay (wait, delay unchanged but listed with --show all)
    assert {r["item"] for r in gate_out.rows(v, show="all") if r["item"].startswith("rank ")} == {
        f"rank {i}" for i in range(n)
    }


def test_unwritable_step_summary_keeps_the_verdict(tmp_path):
    base = write(tmp_path, "b.json", doc([row()]))
    slow = write(tmp_path, "c.json", doc([row(avg=0.9)]))
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "such" / "dir" / "summary.md")}
    r = run_gate("-b", base, base, env=env)
    assert r.exit_code == 0 and "GITHUB_STEP_SUMMARY" in r.stderr
    assert run_gate("-b", base, slow, env=env).exit_code == 1


def test_baseline_command_inputs(tmp_path):
    runner = CliRunner()
    s1 = write(tmp_path, "s1.json", doc([row(avg=0.40)]))
    s2 = write(tmp_path, "s2.json", doc([row(avg=0.45)]))
    r = runner.invoke(baseline_cmd, [str(s1), str(s2)])  # to stdout: two runs
    assert r.exit_code == 0 and len(json.loads(r.stdout)["runs"]) == 2
    broken = write(tmp_path, "broken.json", '{"schema": 3}')
    r = runner.invoke(baseline_cmd, [str(s1), "-o", str(broken), "--append"])
    assert r.exit_code == 2 and "broken.json" in r.stderr
    assert json.loads(broken.read_text()) == {"schema": 3}  # left as it was
    r = runner.invoke(baseline_cmd, [str(tmp_path / "absent.sqlite")])
    assert r.exit_code == 2 and "absent.sqlite" in r.stderr
    if (SAMPLES / "synthetic_nowrapper_2node").exists():  # --each: a folder per run
        out = tmp_path / "b.json"
        d = SAMPLES / "synthetic_nowrapper_2node"
        r = runner.invoke(baseline_cmd, ["--each", str(d), str(d), "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert len(json.loads(out.read_text())["runs"]) == 2


# ------------------------------------------------------------------------- who loads reports


def test_the_gate_opens_no_report(tmp_path):
    """nsyscomm.gate reads Results and JSON documents; a report path is the front door's to load."""
    with pytest.raises(InputError, match=r"api\.load"):
        g.load_runs([DDP])
    with pytest.raises(InputError, match=r"api\.run_gate"):
        g.load_run([DDP])


def test_gate_sources_load_report_paths_in_place(tmp_path):
    base = write(tmp_path, "b.json", doc([row()]))
    side = api.gate_sources([base, DDP])  # baselines: each report path its own job, in order
    assert side[0] == base and isinstance(side[1], api.Result) and side[1].reports == [DDP.name]
    current = api.gate_sources([base, DDP], one_job=True)  # the current side: the reports first
    assert isinstance(current[0], api.Result) and current[1] == base
    # and the gate over them is the gate over the same reports by path
    by_path = api.run_gate([DDP], [DDP])
    by_result = g.run_gate([api.load([DDP])], [api.load([DDP])])
    assert by_path.exit_code == by_result.exit_code == 0
