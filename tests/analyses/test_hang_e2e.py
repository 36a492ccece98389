"""REAL RUNS under nsys of the hang diagnosis: 4-rank gloo torchrun jobs with one injected fault
each (tests/data/hang_job.py), run by `nsyscomm run` as a user would. Each takes 15-40 s on 2
cores.

Needs nsys and torchrun (skipped otherwise), and nvtx <= 0.2.11 for nsys 2022.4 to record ranges.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from nsyscomm.capture import flight_record as fr
from tests.conftest import DATA, NSYS_WROTE_NO_REPORT, JobRun, run_job, run_job_cmd

SCRIPT = DATA / "hang_job.py"
HANG_TIMEOUT_S = 8
MARGIN_S = 150  # nsys's own start, export and the summary on a loaded 2-core machine

pytestmark = [
    pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not on PATH"),
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH"),
]


def _run(tmp_path, fault: str, *extra) -> JobRun:
    env = dict(os.environ, HANG_FAULT=fault)
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    # nsys 2022.4 itself sometimes fails to write its report when other nsys runs share the
    # machine ("boost::filesystem::file_size: No such file or directory", or no report at all):
    # not ours, run again once; the run kept is timed alone
    again_on = (NSYS_WROTE_NO_REPORT, "boost::filesystem")
    options = ("--format", "json", *extra)
    return run_job(tmp_path / f"out-{fault}", SCRIPT, ranks=4, options=options, env=env, again_on=again_on)


def _hang(r):
    try:
        return json.loads(r.stdout)["hang"]
    except (ValueError, KeyError):
        pytest.fail(f"no JSON summary (status {r.returncode}): {r.stderr[-3000:]}")


def test_real_rank_stops_before_collective(tmp_path):
    r = _run(tmp_path, "stop", "--hang-timeout", f"{HANG_TIMEOUT_S}s")
    assert r.returncode == 124, r.stderr[-3000:]
    assert r.seconds < HANG_TIMEOUT_S + MARGIN_S
    assert list(r.out.glob("report*.sqlite")) + list(r.out.glob("report*.arrow")), "nsys's report was not kept"
    # the diagnosis is printed when the hang is found, before nsys's output
    assert "HUNG: no collective finished" in r.stderr
    assert r.stderr.index("missing rank 1") < r.stderr.index("report(s) in")
    h = _hang(r)
    assert h["status"] == "hung"
    b = h["blocked"][0]
    assert (b["group"], b["seq"], b["op"], b["waiting_ranks"]) == ("0", 3, "all_reduce", [0, 2, 3])
    (m,) = b["missing_ranks"]
    assert (m["rank"], m["last_op"], m["last_seq"], m["state"]) == (1, "all_reduce", 2, "stopped")
    assert m["caller"].startswith("hang_job.py:") and m["caller"].endswith(" step")


def test_real_size_mismatch_gloo_aborts(tmp_path):
    r = _run(tmp_path, "size")
    assert r.returncode != 0
    assert "Received data size doesn't match" in r.stderr  # gloo's own abort message
    h = _hang(r)
    assert h["status"] == "desynced"
    assert h["mismatches"] == [
        {"group": "0", "seq": 3, "field": "bytes", "values_by_rank": {"0": 1024, "1": 1024, "2": 2048, "3": 1024}}
    ]
    # the records outlived the abort: a rank died inside the collective it could not finish
    states = {ring.rank: ring.state for ring in fr.read_dir(r.out / "records") if ring.rank >= 0}
    assert "aborted" in states.values()


def test_real_rank_raises_mid_run(tmp_path):
    r = _run(tmp_path, "raise", "--hang-timeout", "120s")
    assert r.returncode not in (0, 124)
    h = _hang(r)
    assert h["status"] == "aborted"
    b = h["blocked"][0]
    assert b["seq"] == 3
    (m,) = b["missing_ranks"]
    assert (m["rank"], m["last_seq"], m["state"]) == (3, 2, "raised")


# its own bounds (the hang reached, then the run's end after Ctrl-C) come first, so that it fails
# with the job ended instead of pytest's time limit leaving the job running
@pytest.mark.timeout(660)
def test_real_ctrl_c_keeps_report_and_diagnoses(tmp_path):
    """Ctrl-C (SIGINT to nsyscomm) while rank 1 is stopped and the others wait: the report is kept
    and the same diagnosis comes first."""
    import signal

    out = tmp_path / "out-ctrl-c"
    env = dict(os.environ, HANG_FAULT="stop")
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    p = subprocess.Popen(
        run_job_cmd(out, SCRIPT, ranks=4, options=("--format", "json")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # three ranks inside seq 3
            rings = [r for r in fr.read_dir(out / "records") if r.rank >= 0]
            if sum(1 for r in rings if r.entered == 4 and r.finished == 3) == 3:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the job never reached its hang")
        time.sleep(1)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert list(out.glob("report*.sqlite")) + list(out.glob("report*.arrow")), stderr[-3000:]
    h = json.loads(stdout)["hang"]
    assert h["status"] == "hung"
    b = h["blocked"][0]
    assert b["seq"] == 3 and b["waiting_ranks"] == [0, 2, 3]
    assert [(m["rank"], m["last_seq"], m["state"]) for m in b["missing_ranks"]] == [(1, 2, "stopped")]
