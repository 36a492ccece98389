"""Real end to end: nsys profiles a 4-rank gloo torchrun job with the wrapper injected by the launcher.

Needs the real ``nsys`` (CI installs Debian's nsight-systems) and nvtx <= 0.2.11
(newer nvtx releases are not recorded by nsys 2022.4). Takes about 20-40 s on 2 cores.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import sqlite3
import sys

import pandas as pd
import pytest

from tests.conftest import DATA, job_did_its_work, torchrun_cmd

SCRIPT = DATA / "train_all_ops.py"
WORLD = 4

pytestmark = [
    pytest.mark.skipif(
        shutil.which("nsys") is None,
        reason="nsys (Nsight Systems) is not on PATH; CI installs Debian's nsight-systems + nsight-systems-target",
    ),
    pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH"),
]


def _nvtx_ok():
    try:
        from importlib.metadata import version

        v = tuple(int(x) for x in version("nvtx").split(".")[:3])
        return v <= (0, 2, 11)
    except Exception:
        return False


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    if not _nvtx_ok():
        pytest.skip("nsys 2022.4 records NVTX ranges only from nvtx <= 0.2.11 (pip install 'nvtx==0.2.11')")
    pytest.importorskip("torch")
    from nsyscomm.capture.launcher import run

    base = tmp_path_factory.mktemp("e2e")
    expect = base / "expect"
    expect.mkdir()
    os.environ["NSYSCOMM_EXPECT_DIR"] = str(expect)
    try:
        # exported as SQLite: read below with sqlite3
        res = run(torchrun_cmd(SCRIPT, ranks=WORLD), output=str(base / "out"), export="sqlite")
    finally:
        os.environ.pop("NSYSCOMM_EXPECT_DIR", None)
    did = {}
    for f in expect.glob("rank*.json"):
        d = json.loads(f.read_text())
        did[d["rank"]] = d
    return res, did


def _nvtx_messages(sqlite_path):
    con = sqlite3.connect(str(sqlite_path))
    rows = con.execute(
        "SELECT e.eventType, (e.globalTid >> 24) & 16777215, coalesce(e.text, s.value) "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId ORDER BY e.start"
    ).fetchall()
    con.close()
    return rows


def test_run_succeeds_and_exports(job):
    res, did = job
    assert job_did_its_work(res.exit_code, res.warnings, len(did), WORLD), res.warnings
    assert len(res.reports) == 1 and res.reports[0].suffix == ".sqlite"
    assert sorted(did) == list(range(WORLD))


def test_raw_nvtx_one_marker_per_rank(job):
    from nsyscomm import nvtx_format as fmt

    res, _ = job
    rows = _nvtx_messages(res.reports[0])
    markers = {fmt.parse(m)["rank"] for _, _, m in rows if m and m.startswith(fmt.RANK_PREFIX)}
    assert markers == {str(r) for r in range(WORLD)}
    ranges = [m for t, _, m in rows if t == 59 and m and m.startswith(fmt.COLLECTIVE_PREFIX)]
    assert ranges, "no nsyscomm ranges recorded (nvtx > 0.2.11 with nsys 2022.4?)"


def test_every_call_is_seen_with_its_size(job):
    import nsyscomm

    res, did = job
    c = nsyscomm.load([str(p) for p in res.reports]).collectives
    assert (c["source"] == "wrapper").all()
    assert set(c["rank"]) == set(range(WORLD))
    for rank, d in did.items():
        mine = c[c["rank"] == rank]
        user = mine[~mine["api"].str.startswith("ddp.")]
        got = collections.Counter((r.op, r.api, None if pd.isna(r.bytes) else int(r.bytes)) for r in user.itertuples())
        want = collections.Counter((x["op"], x["api"], x["bytes"]) for x in d["calls"])
        assert got == want, f"rank {rank}: missing {want - got}, extra {got - want}"
        ddp = mine[mine["api"] == "ddp.allreduce"]
        assert len(ddp) == d["steps"], "one DDP bucket all-reduce per step"
        assert set(ddp["bytes"].astype(int)) == {d["ddp_param_bytes"]}
        assert (mine["api"] == "ddp.broadcast").any(), "DDP's parameter / bucket broadcasts"
        steps = set(mine["step"].dropna().astype(int))
        assert set(range(d["steps"])) <= steps <= set(range(d["steps"] + 1)), "steps from optimizer.step()"


def test_summary_matches_what_the_script_did(job):
    import nsyscomm

    res, did = job
    r = nsyscomm.load([str(p) for p in res.reports])
    want = collections.Counter()
    for d in did.values():
        for x in d["calls"]:
            if x["bytes"] is not None:
                want[(x["op"], x["bytes"])] += 1
        want[("all_reduce", d["ddp_param_bytes"])] += d["steps"]
    s = r.summary.dropna(subset=["bytes"])
    got = {(row.op, int(row.bytes)): int(row.calls) for row in s.itertuples()}
    for key, n in want.items():
        assert got.get(key) == n, f"{key}: summary calls {got.get(key)} != {n}"
    ops = {x["op"] for d in did.values() for x in d["calls"]}
    assert ops <= set(r.summary["op"])
    assert len(ops) == 11


def test_the_late_rank_is_the_straggler(job):
    import nsyscomm

    res, did = job
    r = nsyscomm.load([str(p) for p in res.reports])
    late = next(iter(did.values()))["late_rank"]
    assert r.skew["straggler_rank"] == late
    # the on-time ranks carry the waiting: each waits longer in total than the late rank, past the
    # start-up collective (DDP's first allgather, timed to its completion: its wait is the
    # processes' start-up skew, whichever rank started first)
    wait = (
        r.con.execute(
            "SELECT c.rank, sum(c.duration_ns - l.latency_ns) / 1e6 AS wait_ms FROM collectives c "
            "JOIN logical_collectives l USING (logical_id) WHERE NOT c.setup AND NOT l.startup GROUP BY c.rank"
        )
        .df()
        .set_index("rank")["wait_ms"]
    )
    others = wait.drop(late)
    assert (others > wait[late]).all(), wait.to_dict()
    per = {p["rank"]: p for p in r.skew["per_rank"]}
    assert per[late]["avg_arrival_delay_ms"] == max(p["avg_arrival_delay_ms"] for p in per.values())


def test_cli_run_returns_the_exit_code(tmp_path):
    """The launcher returns the command's exit code (a non-Python command: the hook is inert)."""
    from nsyscomm.capture.launcher import run

    res = run([sys.executable, "-c", "import sys; sys.exit(3)"], output=str(tmp_path / "o"))
    assert res.exit_code == 3
