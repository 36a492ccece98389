"""The hostile corpus of the newer formats: every family of tests/support/hostile_newer.py's
REGISTRY through its commands, the heavy ones (bombs) in child processes under a 4 GB address
space and a time limit. Nothing may end in an internal error or a traceback, hang, run out of
memory, write beside its input, or end otherwise than its construction says. And the limits
that refuse a bomb give way to --memory-limit for a real input of that size."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from nsyscomm.errors import InputError
from nsyscomm.ingest import bounded, limits
from nsyscomm.ingest.kineto import stream as kineto_stream
from tests.support import hostile_newer as H
from tests.support import hostile_whatif as W
from tests.support.hostile_corpus import kineto_trace


def test_newer_formats_through_their_commands(tmp_path):
    totals, per = H.run_corpus(tmp_path)
    print(", ".join(f"{k}: {v}" for k, v in totals.items()))
    failing = {r["case"]: r.get("failures") or "hang" for r in per if r.get("failures") or r.get("hang")}
    assert totals["cases"] >= 40 and totals["command runs"] >= 4 * totals["cases"]
    assert totals["exit-2 one-liners"] >= totals["command runs"] - 20
    for key in ("internal errors", "hangs", "other failures"):
        assert totals[key] == 0, (key, failing)
    names = {c.name for c in H.load_families() if c.heavy}
    heavy = [r for r in per if r["case"] in names]
    assert len(heavy) == len(names) and all("peak_mb" in r for r in heavy)
    assert max(r["peak_mb"] for r in heavy) < H.MEMORY_CAP >> 20


def test_registry_holds_the_issues_families():
    names = {c.name for c in H.load_families()}
    for name in (
        "whatif_duration_string",
        "whatif_rank_list",
        "whatif_stage_nan",
        "whatif_duration_infinite",
        "whatif_steps_overflow",
        "whatif_pp_contradicts",
        "whatif_meta_huge_int",
        "whatif_meta_nested",
        "whatif_meta_billion_laughs",
        "whatif_20m_rows",
        "whatif_long_optypes",
        "kineto_dist_list",
        "kineto_rank_infinite",
        "kineto_correlation_list",
        "kineto_gzip_one_string",
        "kineto_gzip_3m_kernels",
    ):
        assert name in names, sorted(names)
    assert all(c.expect in (H.ERROR, H.OK) and c.commands for c in H.load_families())


def _kernels(path, n: int):
    """A Kineto trace of n NCCL kernels, each with its own launch."""
    t = kineto_trace()
    ev = t["traceEvents"]
    launch, kernel = ev[2], ev[3]
    for i in range(1, n):
        ev.append({**launch, "ts": 2000 + 100 * i, "args": {"correlation": 100 + i}})
        ev.append({**kernel, "ts": 2010 + 100 * i, "args": {**kernel["args"], "correlation": 100 + i}})
    path.write_text(json.dumps(t))
    return path


def test_memory_limit_raises_the_kineto_budget(tmp_path):
    """The events a reader keeps are checked against --memory-limit: refused under a small one
    (one line naming the file and the option), read under the default."""
    p = _kernels(tmp_path / "rank0.json", 3000)
    r = CliRunner().invoke(main, ["summarize", "--no-cache", "--memory-limit", "10MB", str(p)])
    assert r.exit_code == 2, r.output
    assert "rank0.json" in r.stderr and "--memory-limit" in r.stderr and len(r.stderr.splitlines()) == 1
    r = CliRunner().invoke(main, ["summarize", "--no-cache", "--format", "json", str(p)])
    assert r.exit_code == 0, r.output
    assert sum(row["calls"] for row in json.loads(r.stdout)["summary"]) == 3000


def test_memory_limit_raises_the_whatif_budget(tmp_path, monkeypatch):
    """A trace's rows are checked against the budget from its footer: refused under a small one,
    read under a larger one."""
    W.write_whatif(tmp_path, W.whatif_rows(steps=40))
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "100kB")
    from nsyscomm.ingest.straggler import trace as straggler_trace

    with pytest.raises(InputError, match="operations in the trace.*--memory-limit"):
        straggler_trace.read(tmp_path / "trace-T.parquet")
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "1GB")
    ops, meta = straggler_trace.read(tmp_path / "trace-T.parquet")
    assert len(ops) == len(W.whatif_rows(steps=40)["rank"]) and meta["pp_size"] == 2


def test_budget_reads_the_memory_limit(monkeypatch):
    monkeypatch.delenv(limits.MEMORY_LIMIT_ENV, raising=False)
    assert limits.budget() == limits.DEFAULT_BUDGET
    for text, want in (("4GB", 4 * 10**9), ("512MiB", 512 << 20), ("1.5 GB", 1_500_000_000)):
        monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, text)
        assert limits.budget() == want
    monkeypatch.setenv(limits.MEMORY_LIMIT_ENV, "lots")
    assert limits.budget() == limits.DEFAULT_BUDGET


def test_one_value_past_the_cap_is_refused_in_linear_time(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"name": "' + "a" * 5_000_000 + '"}]}')
    with pytest.raises(InputError, match="one value of more than 1,000,000 characters"):
        list(kineto_stream.iter_trace(p, chunk=1 << 16, max_value=1_000_000))
    assert len(list(kineto_stream.iter_trace(p, chunk=1 << 16))) == 1  # under the default cap


def test_yaml_without_aliases_reads_plain_meta(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("dp_size: 2\npp_size: 4\nname: &n x\n")  # an anchor alone expands nothing
    assert bounded.read_yaml(p, "fix")["pp_size"] == 4
    p.write_text("a: &a [1, 2]\nb: *a\n")
    with pytest.raises(InputError, match="alias"):
        bounded.read_yaml(p, "fix")


def test_kept_events_hold_only_bounded_args():
    """What a kept event holds of its args is bounded whatever the trace wrote (KEPT_BYTES)."""
    from nsyscomm.ingest.kineto import checks as kineto_checks

    args = {
        "correlation": 5,
        "Process Group Ranks": "[" + ", ".join(map(str, range(100_000))) + "]",
        "Input Dims": [list(range(100_000)), [2]],
        "Input type": ["float" * 10_000],
        "Collective name": ["allreduce"] * 1000,
        "unused": [0] * 1_000_000,
    }
    slim = kineto_checks.slim_args(args)
    assert set(slim) == {"correlation", "Process Group Ranks", "Input type"}
    assert len(slim["Process Group Ranks"]) == limits.MAX_NAME + len(limits.CUT_MARK)
    assert slim["Input type"] == [limits.cut_name("float" * 10_000)]
    assert kineto_checks.slim_args({"Input Dims": [[4, 8], [1]], "Group size": 2}) == {
        "Input Dims": [[4, 8]],
        "Group size": 2,
    }
