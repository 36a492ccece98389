"""The gate's first day. A baseline of one run knows no noise band: identical
code on a CPU job must pass (with a note saying so and how to record several runs), a real
regression must still fail, and the verdict shows the band and the margin it applied.

The documents are built here with noise of known size: a CPU (gloo) job's host-timed calls,
whose mean sits far from their median and whose run-to-run change reached +650% on one key
between two runs of unchanged code; and a GPU job's kernel-timed calls, mean = median. Two real runs of a gloo job are in
tests/cli/test_readme.py (the README's CI example)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nsyscomm import gate as g
from nsyscomm.commands.gate import gate as gate_cmd
from nsyscomm.gate.single_run import host_timed

STEPS = 20
ELAPSED_MS = 1800.0  # the run's time, as a 20-step gloo job under nsys took


def _doc(avg: float, p50: float, comm: tuple[float, float], wait: tuple[float, float], delay=(0.2, 0.25)) -> dict:
    """A 2-rank job of one 256 KB all_reduce per step (2 ranks: 40 calls, 20 collectives)."""
    calls = 2 * STEPS
    return {
        "schema": 3,
        "tool": "nsyscomm",
        "reports": ["report.arrow"],
        "summary": [
            {
                "op": "all_reduce",
                "bytes": 262144,
                "count": STEPS,
                "calls": calls,
                "ranks": 2,
                "total_ms": avg * STEPS,
                "avg_ms": avg,
                "p50_ms": p50,
                "max_ms": avg * 4,
                "algbw_GBps": 262144 / (avg * 1e6),
                "busbw_GBps": 262144 / (avg * 1e6),
                "group_size": 2,
            }
        ],
        "ranks": [
            {"rank": r, "calls": STEPS, "comm_ms": comm[r], "wait_ms": wait[r], "elapsed_ms": ELAPSED_MS}
            for r in (0, 1)
        ],
        "skew": {
            "straggler_rank": 1,
            # the steady waiting the gate compares (the first meeting left out: docs/gate.md)
            "per_rank": [{"rank": r, "avg_arrival_delay_ms": delay[r], "wait_ms": wait[r]} for r in (0, 1)],
        },
    }


# the same CPU job twice: the second run 6.5x slower per call (+647.9%), its ranks'
# communication 70% more: all of it host scheduling on a loaded machine
CPU_A = _doc(avg=1.45, p50=0.70, comm=(89.7, 91.1), wait=(15.9, 17.3))
CPU_B = _doc(avg=9.40, p50=4.40, comm=(151.8, 146.3), wait=(29.3, 23.8), delay=(0.7, 0.3))
# ... and with rank 1 sleeping 250 ms before each step's all_reduce: rank 0 waits 5 s more
CPU_SLEEP = _doc(avg=1.60, p50=0.75, comm=(5090.0, 95.0), wait=(5000.0, 18.0), delay=(0.2, 250.0))


def _gate(tmp_path, base: list[dict], cur: dict, *opts: str):
    files = []
    for i, d in enumerate(base):
        files += ["--baseline", str(tmp_path / f"b{i}.json")]
        (tmp_path / f"b{i}.json").write_text(json.dumps(d))
    (tmp_path / "cur.json").write_text(json.dumps(cur))
    return CliRunner().invoke(gate_cmd, [*files, str(tmp_path / "cur.json"), "--no-pyproject", *opts])


def test_identical_cpu_code_passes_a_one_run_baseline_with_a_note(tmp_path):
    r = _gate(tmp_path, [CPU_A], CPU_B)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("PASS")
    assert "one baseline run: no noise band is known" in r.output
    assert "nsyscomm baseline --append" in r.output  # how to record several runs
    assert "worse than x2 and by more than 25% of its 1800 ms" in r.output


def test_a_straggler_still_fails_a_one_run_baseline_and_shows_band_and_margin(tmp_path):
    r = _gate(tmp_path, [CPU_A], CPU_SLEEP)
    assert r.exit_code == 1, r.output
    assert r.output.startswith("FAIL") and "wait time" in r.output
    assert "margin" in r.output and "+100% and 450 ms" in r.output  # x2 and 25% of 1800 ms
    assert "none (1 run)" in r.output  # the band column: no band known
    out = json.loads(_gate(tmp_path, [CPU_A], CPU_SLEEP, "--format", "json").output)
    wait = next(
        c for i in out["items"] if i["name"] == "rank 0" for c in i["comparisons"] if c["metric"] == "rank.wait_ms"
    )
    assert wait["status"] == "regression" and wait["single_run"] is True
    assert wait["threshold"] == {"rel_pct": 100.0, "abs": 450.0}
    md = _gate(tmp_path, [CPU_A], CPU_SLEEP, "--format", "markdown").output
    assert "| margin |" in md and "+100% and 450 ms" in md


def test_a_kernel_timed_key_keeps_the_plain_thresholds_with_one_run(tmp_path):
    """Calls whose mean is their median (NCCL kernels timed on the GPU) are stable from run to
    run: their latency 50% up fails on one baseline run, as before."""
    gpu = _doc(avg=0.177, p50=0.177, comm=(17.2, 8.2), wait=(11.4, 2.5))
    slower = _doc(avg=0.266, p50=0.266, comm=(17.2, 8.2), wait=(11.4, 2.5))
    r = _gate(tmp_path, [gpu], slower)
    assert r.exit_code == 1, r.output
    assert "avg latency" in r.output and "+10% and 0.01 ms" in r.output


def test_several_baseline_runs_show_their_band(tmp_path):
    r = _gate(tmp_path, [CPU_A, CPU_B], CPU_SLEEP, "--show", "all")
    assert r.exit_code == 1, r.output
    assert "one baseline run" not in r.output
    # rank 0's wait: the two runs' band (15.9..29.3) widened by its own width, and the host-timed
    # margin a wait keeps: the runs' spread is no bound on the scheduler's noise (docs/gate.md)
    assert "2.500..42.700" in r.output
    assert "+100% and 450 ms" in r.output
    assert _gate(tmp_path, [CPU_A, CPU_B], CPU_A).exit_code == 0


def test_the_single_run_margin_is_a_setting(tmp_path):
    """single_run_factor = 1 and single_run_share = 0: one run is held to the plain thresholds."""
    strict = g.override(g.Settings(), single_run_factor=1, single_run_share=0)
    a, b = g.run_from_doc(CPU_A, "a"), g.run_from_doc(CPU_B, "b")
    assert g.compare([a], b).exit_code == 0
    assert g.compare([a], b, strict).exit_code == 1
    cfg = tmp_path / "gate.toml"
    cfg.write_text("single_run_factor = 1\nsingle_run_share = 0\n")
    assert _gate(tmp_path, [CPU_A], CPU_B, "--config", str(cfg)).exit_code == 1
    cfg.write_text("single_run_factor = 0.5\n")
    r = _gate(tmp_path, [CPU_A], CPU_B, "--config", str(cfg))
    assert r.exit_code == 2 and "single_run_factor must be >= 1" in r.output


def test_a_run_without_gpu_kernels_counts_as_host_timed_whatever_its_spread(tmp_path):
    """On a quiet machine a gloo key's mean may sit near its median; the run has no GPU kernels
    (an empty overlap section) all the same, and its timings get the single-run margin."""
    steady = _doc(avg=0.50, p50=0.48, comm=(20.0, 20.0), wait=(2.0, 2.0))
    slower = _doc(avg=0.70, p50=0.66, comm=(28.0, 27.0), wait=(2.8, 2.6))  # +40%: within x2 and 25%
    assert _gate(tmp_path, [steady], slower).exit_code == 1  # nothing says it is host-timed
    no_kernels = {"per_rank": [], "per_step": []}
    r = _gate(tmp_path, [{**steady, "overlap": no_kernels}], {**slower, "overlap": no_kernels})
    assert r.exit_code == 0, r.output
    assert "timed on the host" in r.output


def test_a_straggler_that_flips_between_identical_runs_is_no_news(tmp_path):
    """Which rank of a balanced job arrives last most often changes from run to run; the note
    says so only when the arrival delays moved beyond their margin."""
    flipped = {**CPU_B, "skew": {**CPU_B["skew"], "straggler_rank": 0}}
    r = _gate(tmp_path, [CPU_A], flipped)
    assert r.exit_code == 0 and "straggler changed" not in r.output, r.output
    slow = {**CPU_SLEEP, "skew": {**CPU_SLEEP["skew"], "straggler_rank": 0}}
    assert "straggler changed" in _gate(tmp_path, [CPU_A], slow).output


def test_a_gloo_run_whose_calls_have_overlap_rows_is_host_timed():
    """Calls without kernels have overlap rows (the part of their run the caller waited through),
    so an empty overlap section no longer marks a host-timed run: the summary says where its calls
    were timed (`overlap.timed_on`), and a gloo job keeps the single-run margin."""
    golden = Path(__file__).resolve().parents[1] / "golden"
    gloo = json.loads((golden / "gloo_cpu.json").read_text())
    assert gloo["overlap"]["per_rank"] and gloo["overlap"]["timed_on"] == "host"
    assert host_timed(gloo)
    nccl = json.loads((golden / "real_h100_nccl.json").read_text())
    assert nccl["overlap"]["timed_on"] == "device" and not host_timed(nccl)
