"""Golden JSON: `summarize --format json` of every sample, real export and a generated report.

The files in tests/golden/ hold what the code printed when they were last written: they guard
against unintended change, while the figures that matter have independent checks beside them
(truth from construction, plain SQL on the real exports). This test runs the current code on the
same inputs and checks that every key and value in a golden file is still printed, the same: the JSON contract allows extra
keys (a new analysis may add one), never a changed or missing one. A change meant to alter an
existing value must say so by rewriting the golden file in the same commit:

    NSYSCOMM_UPDATE_GOLDEN=1 python -m pytest tests/views/test_golden.py
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.analyses import invariants
from nsyscomm.cli import main
from tests.conftest import GOLDEN, REAL, SAMPLES

UPDATE = os.environ.get("NSYSCOMM_UPDATE_GOLDEN") == "1"

# name -> (inputs relative to their root, extra arguments); "real:" paths live in ../shared/real
CASES: dict[str, tuple[list[str], list[str]]] = {
    "ddp_4rank": (["sample:synthetic_ddp_4rank.sqlite"], []),
    "ddp_4rank_by_caller": (["sample:synthetic_ddp_4rank.sqlite"], ["--by", "caller"]),
    "fsdp_8rank": (["sample:synthetic_fsdp_8rank.sqlite"], []),
    "gloo_cpu": (["sample:synthetic_gloo_cpu.sqlite"], []),
    "nowrapper_2node": (["sample:synthetic_nowrapper_2node"], []),
    # two jobs read as one on request (without --merge they are refused)
    "two_runs": (["sample:synthetic_ddp_4rank.sqlite", "sample:synthetic_gloo_cpu.sqlite"], ["--merge"]),
    "ddp_4rank_nccl_log": (
        ["sample:synthetic_ddp_4rank.sqlite"],
        ["--nccl-log", "real:nccl-logs/aws-p5-h100-16rank-nccl-debug-info.log"],
    ),
    "real_nsys2022.1": (["real:nsys/nsys2022.1_1gpu_schema2.9.sqlite"], []),
    "real_nsys2023.3": (["real:nsys/nsys2023.3_no_cuda_no_nvtx.sqlite"], []),
    "real_nsys2025.1": (["real:nsys/nsys2025.1_1gpu_nvtx.sqlite"], []),
    "real_nsys2026.1": (["real:nsys/nsys2026.1_tiny.sqlite"], []),
    "real_h100_nccl": (["real:nsys/nsys2026.2_2xH100_nccl_window.sqlite"], []),
    "real_h100_nccl_by_caller": (["real:nsys/nsys2026.2_2xH100_nccl_window.sqlite"], ["--by", "caller"]),
    "real_h100_nonccl": (["real:nsys/nsys2026.2_2xH100_nonccl_window.sqlite"], []),
    "real_kineto_nccl_data": (["real:kineto/nccl_data.json.gz"], []),
    "real_kineto_df_index": (["real:kineto/df_index_resolver.json.gz"], []),
    "real_kineto_trace_filter": (["real:kineto/trace_filter"], []),
    "real_straggler_analysis": (["real:straggler_analysis"], []),
    "real_flight_recorder": (["real:flight_recorder/nvrx/gpu_error_1st"], []),
}


def _resolve(spec: str, tmp: Path) -> str:
    kind, rel = spec.split(":", 1)
    if kind == "sample":
        p = SAMPLES / rel
        if not p.exists():
            pytest.skip(f"sample {rel} not present")
        return str(p)
    if kind == "real":
        p = REAL / rel
        if not p.exists():
            pytest.skip(f"real data {rel} not present (../shared/real is only beside the project checkout)")
        return str(p)
    raise ValueError(spec)


def _subset_diff(golden, new, where: str = "$", added: set[str] | None = None) -> list[str]:
    """Where `golden` is not contained in `new` (dict keys may be added, nothing else may change).
    Keys `new` adds are collected in `added` (as paths with list indices left out)."""
    if isinstance(golden, dict):
        if not isinstance(new, dict):
            return [f"{where}: was an object, now {type(new).__name__}"]
        out: list[str] = []
        for k, v in golden.items():
            if k not in new:
                out.append(f"{where}.{k}: missing")
            else:
                out.extend(_subset_diff(v, new[k], f"{where}.{k}", added))
        if added is not None:
            added.update(f"{where}.{k}" for k in new if k not in golden)
        return out
    if isinstance(golden, list):
        if not isinstance(new, list) or len(new) != len(golden):
            return [f"{where}: list of {len(golden)} became {len(new) if isinstance(new, list) else new!r}"]
        out = []
        for g, n in zip(golden, new, strict=True):
            out.extend(_subset_diff(g, n, f"{where}[]", added))
        return out
    return [] if golden == new else [f"{where}: {golden!r} became {new!r}"]


def test_subset_diff_names_missing_changed_and_added_keys():
    added: set[str] = set()
    diffs = _subset_diff({"a": 1, "b": [{"c": 2}], "d": 3}, {"a": 1, "b": [{"c": 5, "e": 0}], "f": 4}, added=added)
    assert diffs == ["$.b[].c: 2 became 5", "$.d: missing"]
    assert added == {"$.b[].e", "$.f"}
    assert _subset_diff([1, 2], [1]) == ["$: list of 2 became 1"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_json(name, tmp_path):
    specs, extra = CASES[name]
    inputs = [_resolve(s, tmp_path) for s in specs]
    extra = [_resolve(a, tmp_path) if a.startswith(("real:", "sample:")) else a for a in extra]
    res = CliRunner().invoke(main, ["summarize", *inputs, "--format", "json", "--no-cache", *extra])
    assert res.exit_code == 0, res.output
    # where the checkout and ../shared lie is no part of the output's meaning
    new = json.loads(res.stdout.replace(str(REAL), "<real>").replace(str(SAMPLES), "<samples>"))
    # every input's output keeps the summary's invariants: what broke one is withheld with its
    # reason (nsyscomm.analyses.invariants), and one straggler in every view
    assert invariants.violations(new) == []
    named = new["diagnosis"]["late_ranks"]
    assert new["skew"]["straggler_rank"] == (named[0]["rank"] if named else None)
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path.name}: write it with NSYSCOMM_UPDATE_GOLDEN=1")
    added: set[str] = set()
    diffs = _subset_diff(json.loads(path.read_text()), new, added=added)
    assert not diffs, f"{len(diffs)} differences from {path.name}:\n" + "\n".join(diffs[:40])
    if added:  # allowed by the contract, but said: a golden file that lags hides nothing then
        warnings.warn(f"{path.name}: keys not in the golden file: {', '.join(sorted(added)[:20])}", stacklevel=1)


def test_generated_report_json_equals_its_truth(tmp_path):
    """A report generated with a seed the bundled samples do not use, against the generator's
    ground truth (nsyscomm.synth.truth, computed from construction), not against a golden file."""
    from nsyscomm import synth

    truth = synth.generate("synthetic_ddp_4rank", tmp_path, seed=11)
    res = CliRunner().invoke(
        main, ["summarize", str(tmp_path / "synthetic_ddp_4rank.sqlite"), "--format", "json", "--no-cache"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    got = {(r["op"], r["bytes"]): r for r in doc["summary"]}
    assert set(got) == {(t["op"], t["bytes"]) for t in truth["summary"]}
    for t in truth["summary"]:
        r = got[(t["op"], t["bytes"])]
        assert (r["count"], r["calls"], r["ranks"], r["group_size"]) == (
            t["count"],
            t["calls"],
            t["ranks"],
            t["group_size"],
        )
        for key in ("total", "avg", "p50", "max"):
            assert r[f"{key}_ms"] == pytest.approx(t[f"{key}_ns"] / 1e6, abs=1e-9), (t["op"], key)
        assert r["algbw_GBps"] == pytest.approx(t["algbw_GBps"], rel=1e-9)
        assert r["busbw_GBps"] == pytest.approx(t["busbw_GBps"], rel=1e-9)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert set(ranks) == {t["rank"] for t in truth["ranks"]}
    for t in truth["ranks"]:
        r = ranks[t["rank"]]
        assert (r["calls"], r["bytes"], r["host"]) == (t["calls"], t["bytes"], t["host"])
        assert r["comm_ms"] == pytest.approx(t["comm_ns"] / 1e6, abs=1e-9)
        assert r["wait_ms"] == pytest.approx(t["wait_ns"] / 1e6, abs=1e-9)
        assert r["elapsed_ms"] == pytest.approx(t["elapsed_ns"] / 1e6, abs=1e-9)
    skew = doc["skew"]
    assert (skew["straggler_rank"], skew["instances"]) == (truth["skew"]["straggler_rank"], truth["skew"]["instances"])
    per = {p["rank"]: p for p in skew["per_rank"]}
    for t in truth["skew"]["per_rank"]:
        p = per[t["rank"]]
        assert p["late_count"] == t["late_count"]
        assert p["wait_ms"] == pytest.approx(t["wait_ns"] / 1e6, abs=1e-9)
        assert p["avg_arrival_delay_ms"] == pytest.approx(t["avg_arrival_delay_ns"] / 1e6, abs=1e-9)
