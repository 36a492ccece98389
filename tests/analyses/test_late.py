"""Why a rank is late (nsyscomm.analyses.late).

Ground truth by construction: a real 2-rank gloo job under `nsyscomm run` (nsys 2022.4 records
the OS-runtime calls) where rank 1 sleeps before one all_reduce of every step
(tests/data/late_job.py); and the bundled synthetic DDP sample, whose rank 2 is made late on
the host side (the generator delays its launches) in a report without an OS-runtime trace.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from nsyscomm.api import load
from tests.conftest import DATA, DONE_ENV, SAMPLES, done_ranks, job_did_its_work, run_job

JOB = DATA / "late_job.py"


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if marker in line)


def test_host_delay_without_os_runtime_trace_is_unknown_with_the_reason():
    """synthetic_ddp_4rank: rank 2's CPU is late to launch (synth's late_ns), the report has no
    OSRT_API table: the cause is unknown, and says the trace is missing, never a guess."""
    res = load([SAMPLES / "synthetic_ddp_4rank.sqlite"], cache=False)
    late = res.late
    rank2 = late[late["rank"] == 2]
    assert len(rank2) >= 8
    host_side = rank2[rank2["cause"] == "unknown"]
    assert len(host_side) >= len(rank2) // 2
    assert host_side["detail"].str.contains("no OS-runtime trace").all()
    # the wrapper's report: made by nsyscomm run, whose preset decides; the advice names the preset
    assert host_side["detail"].str.contains("nsyscomm run's default preset records it; --preset light does not").all()
    assert not (late["cause"] == "host").any()  # nothing may claim a host cause it cannot see
    assert not res.osrt_traced


@pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None,
    reason="nsys and torchrun are needed for the real run",
)
def test_real_sleeping_rank_is_named_with_the_sleep_and_the_caller(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("NSYSCOMM_HANG_TIMEOUT", None)
    env[DONE_ENV] = str(tmp_path)
    r = run_job(out, JOB, options=("--format", "json"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(tmp_path), 2), r.stderr[-3000:]
    doc = json.loads(r.stdout)
    slept_ms = [float(x) * 1e3 for x in (tmp_path / "sleeps.1").read_text().split()]
    assert len(slept_ms) == 6 and min(slept_ms) >= 150, slept_ms
    late = [row for row in doc["diagnosis"]["late"] if row["rank"] == 1]
    line = _line("LATE_LINE")
    ours = [row for row in late if row["caller"] and f"late_job.py:{line}" in row["caller"]]
    assert len(ours) >= 5, doc["diagnosis"]["late"]  # 6 steps; the capture may miss an edge
    for row in ours:
        assert row["cause"] == "host", row
        assert "clock_nanosleep" in row["detail"] or "sleep" in row["detail"], row
        # the sleeps as the program measured them: a delay off by a factor crosses these bounds
        assert 0.8 * min(slept_ms) <= row["delay_ms"] <= 1.2 * max(slept_ms) + 20, (row, slept_ms)
    # the first all_reduce is every rank's first meeting: start-up explains its skew only as far
    # as each rank's time from init_process_group to it does. The job measured that time itself;
    # on a busy machine one rank can take far longer, and is then late there by the difference
    took = {r: float((tmp_path / f"first.{r}").read_text()) for r in (0, 1)}
    slower = max(took, key=took.__getitem__)
    extra_ms = took[slower] - took[1 - slower]
    first = doc["startup"]["rows"][0]
    assert first["late_ms"] == pytest.approx(extra_ms, abs=10 + 0.1 * extra_ms), (first, took)
    at_first = [row for row in doc["diagnosis"]["late"] if row["seq"] == 0]
    if extra_ms < 80:  # start-up: no rank named, the meeting set aside
        assert not at_first, (at_first, took)
        assert doc["startup"]["collectives"] == 1, doc["startup"]
    elif extra_ms > 130:  # past the rule's 100 ms: the slower rank named, nothing set aside
        assert [row["rank"] for row in at_first] == [slower], (at_first, took)
        assert doc["startup"]["collectives"] == 0, doc["startup"]
    # no_straggler removes every wait but the start-up's: over the job's steady steps it saves
    # the sleep of each of steps 0-5 among them, and the first meeting's lateness when step 0 is
    # among them, within 10%
    ns = next(w for w in doc["diagnosis"]["what_if"] if w["scenario"] == "no_straggler")
    assert ns["warmup_steps"] == doc["warmup"]["steps"]
    # (a step the replay could not reproduce on a loaded machine is withheld with its reason, and
    # counts in no total)
    withheld = {st["step"] for st in ns["steps"] if st.get("withheld")}
    slept = [s for s in range(6) if s not in ns["warmup_steps"] and s not in withheld]
    first_late = first["late_ms"] if 0 in slept and not first["set_aside"] else 0.0
    assert ns["total_saved_ms"] == pytest.approx(150 * len(slept) + first_late, rel=0.10), ns
    # and in each later step about the sleep (steps 1-5; after the sixth optimizer step only the
    # job's closing barrier remains)
    later = [st for st in ns["steps"] if 1 <= st["step"] <= 5 and not st.get("withheld")]
    assert len(later) + len(withheld & {1, 2, 3, 4, 5}) == 5 and len(later) >= 3, ns["steps"]
    for st in later:
        assert st["saved_ms"] == pytest.approx(150, rel=0.25), st


@pytest.mark.skipif(
    shutil.which("nsys") is None or shutil.which("torchrun") is None,
    reason="nsys and torchrun are needed for the real run",
)
def test_real_device_mesh_dimensions_are_named(tmp_path):
    """A 2x2 DeviceMesh ("dp", "tp") under `nsyscomm run`: tp groups are ranks {0,1} and {2,3},
    dp groups {0,2} and {1,3} (row-major), the default group is the world."""
    job = DATA / "mesh_job.py"
    env = {**os.environ, DONE_ENV: str(tmp_path)}
    r = run_job(tmp_path / "out", job, ranks=4, options=("--format", "json"), env=env)
    assert job_did_its_work(r.returncode, r.stderr, done_ranks(tmp_path), 4), r.stderr[-3000:]
    dims = json.loads(r.stdout)["diagnosis"]["dimensions"]
    by_ranks = {tuple(d["ranks"]): d for d in dims}
    for ranks, dim in [((0, 1), "tp"), ((2, 3), "tp"), ((0, 2), "dp"), ((1, 3), "dp"), ((0, 1, 2, 3), "world")]:
        assert by_ranks[ranks]["dimension"] == dim, dims
    assert all(d["source"] == "name" for d in dims if d["dimension"] in ("dp", "tp")), dims
    assert all(d["comm_ms"] > 0 for d in dims)


def test_dimension_names_and_patterns():
    from nsyscomm.analyses.dimensions import from_name

    assert [
        from_name(n)
        for n in (
            "mesh_dp",
            "mesh_tp",
            "mesh_pp",
            "mesh_ep",
            "mesh_cp",
            "mesh_dp_shard",
            "tensor_parallel",
            "mesh_foo",
            None,
        )
    ] == ["dp", "tp", "pp", "ep", "cp", "dp", "tp", None, None]


def test_trace_shows_each_late_arrival_on_the_late_ranks_track():
    from nsyscomm.views import trace

    res = load([SAMPLES / "synthetic_ddp_4rank.sqlite"], cache=False)
    doc = trace.build(res)
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "late_arrival"]
    late = res.late
    assert len(slices) == len(late) > 0
    for ev, row in zip(
        sorted(slices, key=lambda e: (e["pid"], e["ts"])), late.sort_values(["rank", "first_arrival"]).itertuples()
    ):
        assert ev["pid"] == row.rank and ev["args"]["cause"] == row.cause
        assert ev["dur"] == pytest.approx(row.delay_ms * 1000, abs=0.002)


def test_html_waterfall_parts_add_up_to_each_measured_step():
    """The waterfall splits each step's measured time (the what-if's) into compute, exposed
    transfer and waiting; the parts come from the calls' durations, not from the step time."""
    import re

    from nsyscomm.views import diagnosis_html

    res = load([SAMPLES / "synthetic_ddp_4rank.sqlite"], cache=False)
    svg = diagnosis_html.waterfall(res)
    measured = {s["step"]: s["step_ms_before"] for s in res.what_if[0]["steps"]}
    parts: dict[int, float] = {}
    for step, ms in re.findall(r"<title>step (\d+): [^<]* ([0-9.]+) ms</title>", svg):
        parts[int(step)] = parts.get(int(step), 0.0) + float(ms)
    assert parts and set(parts) <= set(measured)
    for step, total in parts.items():
        assert total == pytest.approx(measured[step], abs=0.003)
    br = res.step_breakdown
    assert (br["wait_ms"] > 0).any() and (br["exposed_ms"] >= 0).all()


@pytest.mark.parametrize(
    "osrt,ranges", [(False, False), (True, False), (False, True), (True, True)], ids=["bare", "osrt", "nvtx", "both"]
)
def test_two_link_chain_is_followed_to_its_root(tmp_path, osrt, ranges):
    from tests.support import late_jobs as lj

    res = load([lj.write_chain_job(tmp_path, osrt=osrt, ranges=ranges)], cache=False)
    late = res.late.set_index("group")
    assert set(late.index) == {"1", "2", "3"}  # A, B, C; the warm-up was on time
    a, b, c = late.loc["1"], late.loc["2"], late.loc["3"]
    assert (a["rank"], b["rank"], c["rank"]) == (0, 1, 2)
    # A: the host delay; B: A's end came that plus A's transfer and rank 1's gap after the warm-up's
    # end; C: B's transfer and rank 2's gap more (construction in tests/support/late_jobs.py)
    d = lj.HOST_DELAY_NS
    assert a["delay_ms"] * 1e6 == pytest.approx(d, abs=1)
    assert b["delay_ms"] * 1e6 == pytest.approx(d + lj.GAP + lj.XFER, abs=1)
    assert c["delay_ms"] * 1e6 == pytest.approx(d + 2 * (lj.GAP + lj.XFER), abs=1)
    assert b["cause"] == c["cause"] == "previous_comm"
    assert b["root_rank"] == c["root_rank"] == 0
    assert "held up in all_reduce seq 0 of group 1" in b["detail"]
    assert "held up in all_reduce seq 0 of group 2" in c["detail"] and "root: rank 0" in c["detail"]
    # the enclosing train_step range is never named; load_batch is, with or without OSRT
    assert "train_step" not in a["detail"]
    if osrt:
        assert a["cause"] == "host" and "clock_nanosleep 2.0 ms" in a["detail"]
        assert res.osrt_traced
    if ranges:
        assert a["cause"] == "host" and f"{lj.LOAD_RANGE} 2.0 ms" in a["detail"]
    if ranges and not osrt:
        assert a["detail"].startswith("NVTX ranges on the calling thread") and "no OS-runtime trace" in a["detail"]
    if not osrt and not ranges:
        assert a["cause"] == "unknown" and "no OS-runtime trace" in a["detail"]
    assert a["caller"] == lj.CALLERS["A"]


def test_slower_kernel_on_one_rank_is_gpu_compute(tmp_path):
    from tests.support import late_jobs as lj

    res = load([lj.write_slow_kernel_job(tmp_path)], cache=False)
    late = res.late
    assert len(late) == 4 and (late["rank"] == 1).all()
    assert (late["cause"] == "gpu_compute").all(), late[["cause", "detail"]]
    for row in late.itertuples():
        assert row.delay_ms == pytest.approx(lj.SLOW_KERNEL_NS / 1e6, rel=0.08)  # + the kernels' < 5% jitter
        assert "launched on time" in row.detail
    # the kernel that ran longer is named first, with its extra time read from the report's own
    # kernel rows: rank 1's SLOW_KERNEL minus rank 0's in the same step (the only other rank)
    import sqlite3

    con = sqlite3.connect(tmp_path / "report.sqlite")
    rows = con.execute(
        'SELECT k.deviceId, k."end" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k '
        "JOIN StringIds s ON s.id = k.shortName WHERE s.value = ? ORDER BY k.start",
        (lj.SLOW_KERNEL,),
    ).fetchall()
    con.close()
    durs = {0: [d for dev, d in rows if dev == 0], 1: [d for dev, d in rows if dev == 1]}
    for row, slow, fast in zip(late.sort_values("seq").itertuples(), durs[1], durs[0]):
        named = row.detail.split("longer than on the other ranks: ")[1]
        assert named.startswith(f"{lj.SLOW_KERNEL} +{round((slow - fast) / 1e6, 3)} ms"), row.detail


def test_equal_delays_come_out_in_the_collectives_order(tmp_path):
    """3,000 late arrivals of exactly the same delay (tests/support/late_jobs.py): the rows, and the JSON
    list made from them, are ordered by rank, delay, then group and seq, the same in every run."""
    from nsyscomm.analyses.contract import document
    from tests.support import late_jobs as lj

    res = load([lj.write_tied_delays_job(tmp_path)], cache=False)
    late = res.late
    assert len(late) == 3000 and (late["rank"] == 1).all()
    assert (late["delay_ms"] * 1e6).round().eq(lj.HOST_DELAY_NS).all()
    got = list(zip(late["group"], late["seq"]))
    assert got == sorted(got)
    rows = document(res, by_caller=False)["diagnosis"]["late"]
    assert [(r["group"], r["seq"]) for r in rows] == got


def test_dimension_patterns_read_ranks_in_numeric_order():
    """16 ranks, no group membership recorded (a report without the wrapper): dp groups of ranks
    a stride 4 apart and tp groups of 4 consecutive ranks, told apart by their ranks alone. Ranks
    10 to 15 sort before 2 as text: the pattern needs them in numeric order."""
    from nsyscomm import duck
    from nsyscomm.analyses import dimensions

    groups = {f"dp{r}": [r, r + 4, r + 8, r + 12] for r in range(4)}
    groups |= {f"tp{k}": [4 * k + i for i in range(4)] for k in range(4)}
    con = duck.connect()
    try:
        con.execute(
            'CREATE TABLE collectives ("group" VARCHAR, rank INTEGER, op VARCHAR, duration_ns BIGINT, '
            "gpu_start BIGINT, busy_at_start BIGINT, busy_at_end BIGINT, group_size INTEGER, "
            "group_ranks VARCHAR, logical_id BIGINT)"
        )
        rows = [
            (g, r, "all_reduce", 1000, None, None, None, 4, None, i)
            for i, (g, rs) in enumerate(groups.items())
            for r in rs
        ]
        con.executemany("INSERT INTO collectives VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute(
            "CREATE TABLE logical_collectives AS SELECT DISTINCT logical_id, 1000 AS latency_ns FROM collectives"
        )
        con.execute('CREATE TABLE group_descs ("group" VARCHAR, "desc" VARCHAR)')
        con.execute("ALTER TABLE collectives ADD COLUMN setup BOOLEAN DEFAULT false")
        con.execute("ALTER TABLE collectives ADD COLUMN completed BOOLEAN DEFAULT true")
        con.execute("ALTER TABLE collectives ADD COLUMN exec_start BIGINT DEFAULT 0")
        con.execute("ALTER TABLE collectives ADD COLUMN exec_end BIGINT DEFAULT 1000")
        got = dimensions.dimensions(con).set_index("group")
    finally:
        con.close()
    for g, rs in groups.items():
        assert got.loc[g, "ranks"] == ",".join(map(str, rs)), g
        assert (got.loc[g, "dimension"], got.loc[g, "source"]) == (g[:2], "pattern"), g


def _gap_events_reference(calls, events):
    """What sql/late_arrivals.sql must give per late arrival, by its own rules written out:
    every event of the calling thread that overlaps the host gap (prev_cpu_end, cpu_start),
    clipped to it; OS-runtime calls summed per name, NVTX ranges that do not enclose the whole gap
    as the longest per name."""
    out = {}
    for lid, (key, prev_end, cpu_start) in calls.items():
        osrt: dict = {}
        nvtx: dict = {}
        if prev_end is not None:
            for kind, thread, start, end, name in events:
                if thread != key or not (end > prev_end and start < cpu_start):
                    continue
                ns = min(end, cpu_start) - max(start, prev_end)
                if kind == "osrt":
                    osrt[name] = osrt.get(name, 0) + ns
                elif not (start <= prev_end and end >= cpu_start):
                    nvtx[name] = max(nvtx.get(name, ns), ns)
        out[lid] = (osrt, nvtx)
    return out


def _assert_listed(text, want, lid):
    """text is "name X ms, name Y ms" for want's (name, ns) in order; X within the 0.1 ms it is
    rounded to (the reference does not copy DuckDB's rounding of halves)."""
    if not want:
        assert text is None, lid
        return
    items = [part.rsplit(" ", 2) for part in text.split(", ")]
    assert [name for name, _, _ in items] == [name for name, _ in want], lid
    for (_, ms, unit), (_, ns) in zip(items, want):
        assert unit == "ms" and abs(float(ms) - ns / 1e6) <= 0.05 + 1e-9, lid


@pytest.mark.parametrize("seed", range(6))
def test_host_events_in_a_gap_match_the_rules(seed):
    """Random OS-runtime calls and NVTX ranges on a few threads, nested, overlapping, tied on
    their start, straddling either edge of a gap or enclosing it, of zero length, and on threads
    and processes beside the calling one; every call of rank 1 late, some gaps inverted (the
    previous call ended after this one began): osrt_ns, osrt_calls, nvtx_ns and nvtx_ranges are
    what the rules give, computed here by brute force."""
    import random

    from nsyscomm import duck

    rnd = random.Random(seed)
    con = duck.connect()
    try:
        con.execute(
            "CREATE TABLE collectives (rank INTEGER, report VARCHAR, pid BIGINT, tid BIGINT, device INTEGER, "
            "gpu_start BIGINT, gpu_end BIGINT, logical_id BIGINT, caller VARCHAR, cpu_start BIGINT, "
            "cpu_end BIGINT, busy_at_start BIGINT, busy_at_end BIGINT, wait_start BIGINT, wait_end BIGINT, "
            "source VARCHAR, exec_start BIGINT GENERATED ALWAYS AS (coalesce(gpu_start, cpu_start)), "
            "exec_end BIGINT GENERATED ALWAYS AS (coalesce(gpu_end, cpu_end)))"
        )
        con.execute(
            'CREATE TABLE logical_collectives (logical_id BIGINT, "group" VARCHAR, seq BIGINT, op VARCHAR, '
            "step BIGINT, participants INTEGER, first_arrival BIGINT, last_arrival BIGINT, last_rank INTEGER)"
        )
        for table in ("host_calls", "host_ranges"):
            con.execute(
                f'CREATE TABLE {table} (report VARCHAR, pid BIGINT, tid BIGINT, start BIGINT, "end" BIGINT, name VARCHAR)'
            )
        con.execute("CREATE TABLE osrt_reports AS SELECT 'a.sqlite' AS report")
        con.execute("CREATE TABLE gap_kernel_reports (report VARCHAR)")
        con.execute(
            "CREATE TABLE gap_kernels (report VARCHAR, pid BIGINT, device INTEGER, gpu_start BIGINT, "
            "name_id BIGINT, ns BIGINT, count BIGINT)"
        )
        con.execute("CREATE TABLE gap_kernel_names (report VARCHAR, name_id BIGINT, name VARCHAR)")
        con.execute("CREATE TABLE rank_spans (rank INTEGER, first_ns BIGINT)")  # no first call measured from it
        # rank 0 on (a.sqlite, 10, 10), rank 1 on (a.sqlite, 11, 11) or, for some calls, on its
        # second thread (a.sqlite, 11, 12): each call's gap is on the thread that made it
        n = 40
        late_calls = {}
        t = 1_000_000
        prev_end = None
        for k in range(n):
            start0 = t
            gap = rnd.choice([0, 1_000, 50_000, 400_000])
            start1 = t + 200_000 + gap  # rank 1 late by more than the noise threshold
            tid1 = 12 if rnd.random() < 0.2 else 11
            # now and then a call that ends after the next one starts (a call of another thread, or
            # one launched ahead on the GPU): the next gap is inverted, prev_cpu_end > cpu_start
            overlapping = rnd.random() < 0.15
            end1 = start1 + (3_000_000 if overlapping else rnd.randint(1_000, 80_000))
            con.execute(
                "INSERT INTO collectives VALUES (0, 'a.sqlite', 10, 10, NULL, NULL, NULL, ?, 'x.py:1', ?, ?, NULL, NULL, "
                "NULL, NULL, 'wrapper'), (1, 'a.sqlite', 11, ?, NULL, NULL, NULL, ?, 'x.py:2', ?, ?, NULL, NULL, NULL, "
                "NULL, 'wrapper')",
                [k, start0, start0 + 10_000, tid1, k, start1, end1],
            )
            con.execute(
                "INSERT INTO logical_collectives VALUES (?, 'g', ?, 'all_reduce', NULL, 2, ?, ?, 1)",
                [k, k, start0, start1],
            )
            late_calls[k] = (("a.sqlite", 11, tid1), prev_end, start1)
            prev_end = end1
            t = (start1 + 100_000) if overlapping else end1 + rnd.randint(10_000, 300_000)
        events = []
        threads = [
            ("a.sqlite", 11, 11),
            ("a.sqlite", 11, 12),
            ("a.sqlite", 10, 10),
            ("b.sqlite", 11, 11),
            ("a.sqlite", 99, 11),
        ]
        names = ["poll", "read", "futex", "load_batch", "train_step"]
        for _ in range(600):
            kind = rnd.choice(["osrt", "nvtx"])
            thread = rnd.choice(threads[:2] * 3 + threads[2:])
            if rnd.random() < 0.05:  # around everything: a range that encloses every gap
                start, end = 0, t + 1
            else:
                start = rnd.randint(500_000, t)
                if rnd.random() < 0.2 and events:  # tied on the start with an earlier event
                    start = rnd.choice(events)[2]
                end = start + rnd.choice(
                    [0, 1, rnd.randint(1, 30_000), rnd.randint(1, 600_000), rnd.randint(1, 3_000_000)]
                )
            events.append((kind, thread, start, end, rnd.choice(names)))
        for key, prev, cpu in late_calls.values():  # events on the gap's very edges
            if prev is not None:
                events += [
                    ("osrt", key, prev - 5, prev, "edge_before"),  # ends as the gap begins: outside
                    ("osrt", key, cpu, cpu + 5, "edge_after"),  # begins as the gap ends: outside
                    ("osrt", key, prev, cpu, "whole_gap"),  # the gap exactly: counted
                    ("nvtx", key, prev, cpu, "whole_gap"),  # encloses the gap: no range's cause
                ]
        for kind, (report, pid, tid), start, end, name in events:
            con.execute(
                f"INSERT INTO {'host_calls' if kind == 'osrt' else 'host_ranges'} VALUES (?, ?, ?, ?, ?, ?)",
                [report, pid, tid, start, end, name],
            )
        con.execute("ALTER TABLE logical_collectives ADD COLUMN setup BOOLEAN DEFAULT false")
        con.execute("ALTER TABLE logical_collectives ADD COLUMN startup BOOLEAN DEFAULT false")
        con.execute("ALTER TABLE logical_collectives ADD COLUMN whole_setup BOOLEAN DEFAULT false")
        con.execute("ALTER TABLE logical_collectives ADD COLUMN completed BOOLEAN DEFAULT true")
        con.execute("ALTER TABLE logical_collectives ADD COLUMN late_ns BIGINT")
        con.execute("UPDATE logical_collectives SET late_ns = last_arrival - first_arrival")
        con.execute("ALTER TABLE logical_collectives ADD COLUMN shadow BOOLEAN DEFAULT false")
        rows = con.execute(duck.sql("late_arrivals"), {"noise_ns": 100_000}).fetchall()
        cols = [d[0] for d in con.description]
    finally:
        con.close()
    want = _gap_events_reference(late_calls, events)
    got = {r[cols.index("logical_id")]: dict(zip(cols, r)) for r in rows}
    assert sorted(got) == list(range(n))
    hits = 0
    for lid, (osrt, nvtx) in want.items():
        row = got[lid]
        assert row["osrt_ns"] == (sum(osrt.values()) if osrt else None), lid
        assert row["nvtx_ns"] == (max(nvtx.values()) if nvtx else None), lid
        _assert_listed(row["osrt_calls"], sorted(osrt.items(), key=lambda kv: (-kv[1], kv[0])), lid)
        _assert_listed(row["nvtx_ranges"], sorted(nvtx.items(), key=lambda kv: (-kv[1], kv[0]))[:3], lid)
        hits += bool(osrt) + bool(nvtx)
    assert hits >= n // 2  # the events do fall in gaps: the comparison is not of two empty sets


def test_the_advice_without_an_os_runtime_trace_names_how_to_record_it():
    """A report of nsyscomm run's wrapper lacks the trace because of its preset: the advice names
    the preset, not nsys's flag the user never typed; any other report is told both ways."""
    from types import SimpleNamespace

    from nsyscomm.analyses.late import _cause

    def row(by_wrapper: bool) -> SimpleNamespace:
        return SimpleNamespace(
            delay=2e6, gap=3e6, others_gap=1e6, on_device=False, host_gap=None, has_osrt=False, nvtx_ns=None,
            by_wrapper=by_wrapper,
        )  # fmt: skip

    cause, detail = _cause(row(True))
    assert cause == "unknown" and "nsyscomm run's default preset records it; --preset light does not" in detail
    assert "nsys -t osrt" not in detail
    cause, detail = _cause(row(False))
    assert cause == "unknown" and "profile with nsys -t osrt, or with nsyscomm run's default preset" in detail


def test_host_events_of_several_reports_reach_the_job_whatever_their_dtypes():
    """The OS-runtime calls of each report go to the job's table through Arrow (stack_arrow):
    names held as pandas' Arrow-backed strings, as Python objects with a missing one, or from a
    cache's large strings; integers with and without NULLs; a report without the trace and one
    with an empty table. Every row arrives with its report, values and NULLs."""
    from types import SimpleNamespace

    import pandas as pd
    import pyarrow as pa

    from nsyscomm import duck
    from nsyscomm.combine.calls import register, stack_arrow

    cols = ["pid", "tid", "start", "end", "name"]
    arrow_backed = pd.DataFrame(
        {"pid": [1, 1], "tid": [2, 3], "start": [10, 20], "end": [15, 25], "name": pd.array(["poll", "read"], "str")}
    )
    objects = pd.DataFrame(
        {
            "pid": pd.array([4, None], "Int64"),
            "tid": [5, 6],
            "start": [30, 40],
            "end": [35, 45],
            "name": pd.Series(["futex", None], dtype=object),
        }
    )
    large = pa.table(
        {c: pa.array([7], pa.int64()) for c in cols[:4]} | {"name": pa.array(["ioctl"], pa.large_string())}
    )
    extracts = [
        SimpleNamespace(report="a", host_calls=arrow_backed),
        SimpleNamespace(report="b", host_calls=objects),
        SimpleNamespace(report="c", host_calls=None),
        SimpleNamespace(report="d", host_calls=pd.DataFrame({c: [] for c in cols})),
        SimpleNamespace(report="e", host_calls=large.to_pandas(types_mapper=pd.ArrowDtype)),
    ]
    con = duck.connect()
    try:
        register(
            con,
            "host_calls",
            stack_arrow(extracts, "host_calls", cols),
            "report::VARCHAR AS report, pid::BIGINT AS pid, tid::BIGINT AS tid, start::BIGINT AS start, "
            '"end"::BIGINT AS "end", name::VARCHAR AS name',
        )
        rows = con.execute(
            'SELECT report, pid, tid, start, "end", name FROM host_calls ORDER BY report, start'
        ).fetchall()
    finally:
        con.close()
    assert rows == [
        ("a", 1, 2, 10, 15, "poll"),
        ("a", 1, 3, 20, 25, "read"),
        ("b", 4, 5, 30, 35, "futex"),
        ("b", None, 6, 40, 45, None),
        ("e", 7, 7, 7, 7, "ioctl"),
    ]


def _walk_reference(prev, cause, i):
    """The chain of holds from arrival i by its rule, one link at a time: each previous_comm
    arrival was held up in the arrival at its previous collective, if there is one; a walk stops
    at an arrival with a cause of its own, at a link to no late arrival, or before an arrival it
    has already met. (first link or None, where it stops, whether it stopped at a met one)."""
    seen, cur, first = set(), i, None
    while cause[cur] == "previous_comm" and prev[cur] is not None:
        nxt = prev[cur] if prev[cur] < len(prev) else None  # ids past the rows: not late
        if nxt is None or nxt in seen:
            return first, cur, nxt is not None
        seen.add(nxt)
        first = nxt if first is None else first
        cur = nxt
    return first, cur, False


@pytest.mark.parametrize("seed", range(8))
def test_chains_of_holds_end_where_walking_them_ends(seed):
    """late._holds keeps where each chain ends instead of walking it again from every arrival:
    long chains, links to collectives without a late arrival, missing links, and (which time
    order rules out, but damaged data might not) cycles and self-links; each arrival's first link
    and end are those of walking its chain."""
    import random
    from types import SimpleNamespace

    from nsyscomm.analyses.late import _holds

    rnd = random.Random(seed)
    n = 400
    cause = [rnd.choice(["previous_comm"] * 6 + ["host", "gpu_compute", "unknown"]) for _ in range(n)]
    prev: list[int | None] = []
    for i in range(n):
        r = rnd.random()
        if r < 0.7 and i:  # the usual: an earlier arrival, often the one just before
            prev.append(i - 1 if rnd.random() < 0.8 else rnd.randrange(i))
        elif r < 0.8:
            prev.append(None)
        elif r < 0.9:
            prev.append(n + rnd.randrange(50))  # a collective with no late arrival
        else:
            prev.append(rnd.randrange(n))  # anywhere: cycles and self-links
    for k in rnd.sample(range(10, n - 10, 20), 4):  # cycles of three, and a self-link
        cause[k : k + 3] = ["previous_comm"] * 3
        prev[k : k + 3] = [k + 2, k, k + 1]
        cause[k + 5], prev[k + 5] = "previous_comm", k + 5
    # logical ids are the row numbers shifted, so that a link names an id, not a position
    rows = [
        SimpleNamespace(logical_id=1000 + i, prev_logical=None if p is None else 1000 + p) for i, p in enumerate(prev)
    ]
    got = _holds(rows, cause)
    walks = [_walk_reference(prev, cause, i) for i in range(n)]
    assert got == [(first, end) for first, end, _ in walks]
    assert any(met for _, _, met in walks)  # the data has cycles
    ends = {i: end for i, (first, end, met) in enumerate(walks) if first is not None and not met}
    assert max(abs(i - end) for i, end in ends.items()) >= 5  # and chains of several links
