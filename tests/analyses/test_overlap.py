"""Exposed communication (nsyscomm/analyses/overlap.py, sql/overlap.sql) against interval arithmetic on
random jobs: calls on several streams that overlap each other, steps (some unknown), devices
(some unknown), compute kernels that hide parts of them, and calls without kernels: synchronous
ones (exposed whole), asynchronous ones with their caller's wait (exposed inside it) and without
one (not counted)."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from nsyscomm import duck
from nsyscomm.analyses import overlap
from nsyscomm.api import Result
from nsyscomm.ingest.busy import busy_before
from nsyscomm.synth import minus_len, union


def _job(seed):
    rng = np.random.default_rng(seed)
    calls, compute = [], []
    rank = 0
    for report in ("a.sqlite", "b.sqlite"):
        for pid in (100, 200):
            for device in (0, 1, None):
                s = rng.integers(0, 1_000, 40)
                calls.append(
                    pd.DataFrame(
                        {
                            "report": report,
                            "pid": pid,
                            "rank": rank,
                            "device": device,
                            "step": pd.array(np.where(rng.random(40) < 0.2, -1, rng.integers(0, 3, 40)), dtype="Int64"),
                            "gpu_start": s,
                            "gpu_end": s + rng.integers(0, 120, 40),
                        }
                    )
                )
                cs = rng.integers(0, 1_100, 30)
                compute.append(
                    pd.DataFrame(
                        {
                            "report": report,
                            "pid": pid,
                            "device": -1 if device is None else device,
                            "start": cs,
                            "end": cs + rng.integers(1, 60, 30),
                        }
                    )
                )
            rank += 1
    calls = pd.concat(calls, ignore_index=True)
    calls["step"] = calls["step"].mask(calls["step"] == -1)
    calls["device"] = calls["device"].astype("Int64")
    calls = calls.astype({"gpu_start": "Int64", "gpu_end": "Int64"})
    calls = calls.assign(
        cpu_start=calls["gpu_start"] - 5,
        cpu_end=calls["gpu_start"] - 1,
        exec_start=calls["gpu_start"],
        exec_end=calls["gpu_end"],
        wait_start=pd.array([pd.NA] * len(calls), dtype="Int64"),
        wait_end=pd.array([pd.NA] * len(calls), dtype="Int64"),
    )
    calls = pd.concat([calls, _cpu_calls(calls, rng, seed)], ignore_index=True)
    compute = pd.concat(compute, ignore_index=True)
    calls = pd.concat([calls[calls["report"] == r] for r in ("a.sqlite", "b.sqlite")], ignore_index=True)
    busy = _with_busy_by_hand(calls, compute)
    # the ingest's own busy_before gives the same edges (it is checked here, not trusted)
    tool = pd.concat(
        [
            duck.arrow_frame(
                busy_before(
                    pa.Table.from_pandas(calls[calls["report"] == r], preserve_index=False),
                    compute[compute["report"] == r],
                )
            )
            for r in ("a.sqlite", "b.sqlite")
        ],
        ignore_index=True,
    )
    for col in ("busy_at_start", "busy_at_end"):
        assert tool[col].astype("Int64").fillna(-1).tolist() == busy[col].fillna(-1).tolist(), col
    return busy, compute


def _cpu_calls(calls: pd.DataFrame, rng, seed) -> pd.DataFrame:
    """Calls without kernels: synchronous (their execution is their host range), asynchronous
    with a wait (which may begin before, during or after the execution), asynchronous without."""
    cpu = calls.sample(60, random_state=seed).reset_index(drop=True)
    s = rng.integers(0, 1_000, len(cpu))
    e = s + rng.integers(0, 120, len(cpu))
    kind = rng.integers(0, 3, len(cpu))  # 0 synchronous, 1 waited for, 2 wait not seen
    ws = s + rng.integers(-50, 150, len(cpu))
    we = ws + rng.integers(0, 100, len(cpu))
    na = pd.array([pd.NA] * len(cpu), dtype="Int64")
    return cpu.assign(
        gpu_start=na,
        gpu_end=na,
        busy_at_start=na,
        busy_at_end=na,
        exec_start=s,
        exec_end=e,
        cpu_start=s,
        cpu_end=np.where(kind == 0, e, s + 1),
        wait_start=pd.array(np.where(kind == 1, ws, -1), dtype="Int64").astype("Int64"),
        wait_end=pd.array(np.where(kind == 1, we, -1), dtype="Int64"),
    ).assign(
        wait_start=lambda d: d["wait_start"].mask(d["wait_start"] == -1),
        wait_end=lambda d: d["wait_end"].mask(d["wait_end"] == -1),
    )


def _busy_at(t: int, islands: list[list[int]]) -> int:
    """Compute busy time before t: the part of each merged compute interval that lies before t."""
    return sum(min(e, t) - s for s, e in islands if s < t)


def _with_busy_by_hand(calls: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """busy_at_start / busy_at_end of each call by interval arithmetic on its process and device
    (a call of no known device reads the kernels of device -1; a call without GPU times none)."""
    out = calls.reset_index(drop=True).copy()
    starts, ends = [], []
    for r in out.itertuples():
        if pd.isna(r.gpu_start) or pd.isna(r.gpu_end):
            starts.append(pd.NA)
            ends.append(pd.NA)
            continue
        dev = -1 if pd.isna(r.device) else int(r.device)
        c = compute[(compute["report"] == r.report) & (compute["pid"] == r.pid) & (compute["device"] == dev)]
        isl = union(zip(c["start"].astype(int), c["end"].astype(int)))
        starts.append(_busy_at(int(r.gpu_start), isl))
        ends.append(_busy_at(int(r.gpu_end), isl))
    out["busy_at_start"] = pd.array(starts, dtype="Int64")
    out["busy_at_end"] = pd.array(ends, dtype="Int64")
    return out


def _expected(calls, compute, by_step):
    rows = {}
    gpu = calls[calls["gpu_start"].notna()]
    keys = ["report", "pid", "device"] + (["step"] if by_step else [])
    for key, g in gpu.groupby(keys, dropna=False):
        report, pid, device = key[:3]
        dev = -1 if pd.isna(device) else device
        c = compute[(compute["report"] == report) & (compute["pid"] == pid) & (compute["device"] == dev)]
        comm = list(zip(g["gpu_start"].astype(int), g["gpu_end"].astype(int)))
        out = (int(g["rank"].iloc[0]), None if not by_step or pd.isna(key[3]) else int(key[3]))
        n, busy, exposed = rows.get(out, (0, 0, 0))
        union = minus_len(comm, [])
        rows[out] = (n + len(g), busy + union, exposed + minus_len(comm, list(zip(c["start"], c["end"]))))
    # calls without kernels, per process: the union of the executions, and of their parts the
    # caller waited through (all of a synchronous call; an asynchronous one without a wait: none)
    cpu = calls[calls["gpu_start"].isna()]
    sync = (cpu["wait_end"].isna()) & (cpu["exec_start"] == cpu["cpu_start"]) & (cpu["exec_end"] == cpu["cpu_end"])
    counted = cpu[sync | cpu["wait_end"].notna()]
    keys = ["report", "pid"] + (["step"] if by_step else [])
    for key, g in counted.groupby(keys, dropna=False):
        spans = list(zip(g["exec_start"].astype(int), g["exec_end"].astype(int)))
        waited = []
        for r in g.itertuples():
            a, b = int(r.exec_start), int(r.exec_end)
            if not pd.isna(r.wait_end):
                a, b = max(a, int(r.wait_start)), min(b, int(r.wait_end))
            if b > a:
                waited.append((a, b))
        out = (int(g["rank"].iloc[0]), None if not by_step or pd.isna(key[2]) else int(key[2]))
        n, busy, exposed = rows.get(out, (0, 0, 0))
        rows[out] = (n + len(g), busy + minus_len(spans, []), exposed + minus_len(waited, []))
    return rows


def _collectives(calls):
    """A database whose collectives table holds these calls."""
    con = duck.connect()
    con.register("calls_df", calls)
    con.execute(
        "CREATE TABLE collectives AS SELECT report, pid::BIGINT AS pid, rank::INTEGER AS rank, "
        "device::INTEGER AS device, step::BIGINT AS step, gpu_start::BIGINT AS gpu_start, "
        "gpu_end::BIGINT AS gpu_end, busy_at_start::BIGINT AS busy_at_start, "
        "busy_at_end::BIGINT AS busy_at_end, cpu_start::BIGINT AS cpu_start, cpu_end::BIGINT AS cpu_end, "
        "exec_start::BIGINT AS exec_start, exec_end::BIGINT AS exec_end, "
        "wait_start::BIGINT AS wait_start, wait_end::BIGINT AS wait_end, 'wrapper' AS source FROM calls_df"
    )
    return con


def _overlap(calls) -> pd.DataFrame:
    return Result(_collectives(calls), ["a.sqlite", "b.sqlite"]).overlap


@pytest.mark.parametrize("seed", range(6))
def test_exposed_communication_is_the_union_minus_compute(seed):
    calls, compute = _job(seed)
    ov = _overlap(calls)
    for scope, by_step in (("rank", False), ("step", True)):
        got = ov[ov["scope"] == scope]
        want = _expected(calls, compute, by_step)
        assert len(got) == len(want)
        for r in got.itertuples():
            key = (int(r.rank), None if pd.isna(r.step) else int(r.step))
            assert (r.calls, r.comm_busy_ns, r.exposed_ns) == want[key], (scope, key)
    # steps unknown first within a rank, as the views expect
    steps = ov[ov["scope"] == "step"]
    assert list(steps["rank"]) == sorted(steps["rank"])
    assert all(pd.isna(g["step"].iloc[0]) for _, g in steps.groupby("rank") if g["step"].isna().any())


@pytest.mark.parametrize("seed", range(3))
def test_processes_taken_a_few_at_a_time_give_the_same_result(seed, monkeypatch):
    """Past overlap.PASS_CALLS, a query's calls go through the numpy pass a few processes at a
    time (each process whole, a report's processes apart): the same result as in one pass."""
    calls, _ = _job(seed)
    # a process the source gave no pid is one too
    calls["pid"] = calls["pid"].astype("Int64").mask((calls["report"] == "b.sqlite") & (calls["pid"] == 200))
    whole = _overlap(calls)
    passes = []
    real = overlap._call_parts
    monkeypatch.setattr(overlap, "_call_parts", lambda t: passes.append(t) or real(t))
    monkeypatch.setattr(overlap, "PASS_CALLS", 1)  # every process on its own
    pd.testing.assert_frame_equal(_overlap(calls), whole)
    got = [set(zip(p["report"].to_pylist(), p["pid"].to_pylist())) for p in passes]
    assert sorted(map(str, got)) == sorted(
        map(str, [{("a.sqlite", 100)}, {("a.sqlite", 200)}, {("b.sqlite", 100)}, {("b.sqlite", None)}])
    )


class _Counting:
    """A connection that counts the rows each query of the calls gives back as Arrow."""

    def __init__(self, con):
        self.con, self.rows = con, []

    def execute(self, *args):
        rel = self.con.execute(*args)
        counting = self

        class _Rel:
            def to_arrow_table(self):
                t = rel.to_arrow_table()
                if "FROM collectives" in args[0]:
                    counting.rows.append(t.num_rows)
                return t

            def fetchall(self):
                return rel.fetchall()

        return _Rel()

    def __getattr__(self, name):
        return getattr(self.con, name)


@pytest.mark.parametrize("seed", range(3))
def test_each_pass_reads_only_its_processes_calls(seed, monkeypatch):
    """Past overlap.PASS_CALLS, each pass's query reads its own processes' calls, not every call
    of the job (a process whole, NULL pids too), and the parts are the same as in one pass."""
    calls, _ = _job(seed)
    calls["pid"] = calls["pid"].astype("Int64").mask((calls["report"] == "b.sqlite") & (calls["pid"] == 200))
    con = _collectives(calls)
    order = ["rank", "step"]
    whole = overlap.parts(con).to_pandas().groupby(order, dropna=False).sum().sort_index()
    largest = int(calls.groupby(["report", "pid"], dropna=False).size().max())
    monkeypatch.setattr(overlap, "PASS_CALLS", largest)
    counting = _Counting(con)
    got = overlap.parts(counting).to_pandas().groupby(order, dropna=False).sum().sort_index()
    pd.testing.assert_frame_equal(got, whole)
    assert counting.rows and max(counting.rows) <= largest < len(calls)
    con.close()
    # the processes in passes of at most `most` calls, in their order; one larger alone
    assert overlap._chunks([("a", 3), ("b", 1), ("c", 2)], 1) == [["a"], ["b"], ["c"]]
    assert overlap._chunks([("a", 3), ("b", 1), ("c", 2), ("d", 5)], 4) == [["a", "b"], ["c"], ["d"]]
    assert overlap._chunks([("a", 3), ("b", 1)], 4) == [None]
