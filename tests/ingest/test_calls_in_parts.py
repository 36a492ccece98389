"""An nsys report's calls made a part at a time (nsyscomm.ingest.nsys.calls): the same rows as
made at once, on a generated report whose truth is known call by call: three processes, wrapper
calls with one, two or no kernels, PyTorch ranges, kernels no range owns, ProfilerStep ranges, a
capture window, an early rank's Join range and an asynchronous call's completion."""

from __future__ import annotations

import pyarrow as pa
import pytest

from nsyscomm import duck, nvtx_format
from nsyscomm.ingest.nsys import calls as nsys_calls
from nsyscomm.ingest.nsys import extract
from nsyscomm.synth import LAUNCH_DRIVER, Report, write_sqlite

KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
US = 1000


def _msg(seq, step, op="all_reduce", async_op=False):
    return nvtx_format.format_collective(
        op, api=op, bytes=4096, dtype="float32", numel=1024, pg=0, gsize=3, seq=seq, step=step,
        async_op=async_op, caller=f"train.py:{seq}",
    )  # fmt: skip


def _kernel(rep, p, tid, at, start):
    call = rep.api_call(p, tid, at, at + US, LAUNCH_DRIVER)
    rep.kernel(p, call["correlationId"], device=p.pid % 8, stream=7, start=start, end=start + 20 * US, name=KERNEL)


def _report(path):
    """Process 100: labels 0 but the last call's 3 (the wrapper saw a step boundary, so its labels
    stay though ProfilerStep ranges hold the calls), calls of one, two and no kernels, a PyTorch
    range and a kernel no range owns on a second thread, a Join range over its last call.
    Process 200: labels 0 and no step marker (its calls take their ProfilerStep#N), a capture
    window that leaves out its first and last calls, an asynchronous call without kernels and
    its completion. Process 300: kernels alone, no range."""
    rep = Report("parts.sqlite")
    t0 = 1_000_000
    a = rep.process(100, "python3", threads={100: "main", 101: "side"})
    rep.mark(a, 100, 10, registered=nvtx_format.format_rank_marker(0, 0, 3, "h"), domain=1)
    for i in range(12):
        t = t0 + i * 100 * US
        if i % 4 == 0:
            rep.range(a, 100, t, t + 400 * US, text=f"ProfilerStep#{5 + i // 4}")
        rep.range(a, 100, t + 10 * US, t + 60 * US, registered=_msg(i, 3 if i == 11 else 0), domain=1)
        for k in range(i % 3):  # none, one or two kernels
            _kernel(rep, a, 100, t + (20 + 10 * k) * US, t + (100 + 30 * k) * US)
        if i % 4 == 1:
            rep.range(a, 101, t + 10 * US, t + 60 * US, text="nccl:all_reduce")
            _kernel(rep, a, 101, t + 20 * US, t + 200 * US)
        if i % 4 == 2:
            _kernel(rep, a, 101, t + 70 * US, t + 300 * US)  # no range holds the launch
    rep.range(a, 100, t0 + 1090 * US, t0 + 1200 * US, registered=nvtx_format.format_joined(2), domain=1)
    b = rep.process(200, "python3")
    rep.mark(b, 200, 10, registered=nvtx_format.format_rank_marker(1, 1, 3, "h"), domain=1)
    rep.range(b, 200, t0 + 50 * US, t0 + 1050 * US, registered=nvtx_format.CAPTURE_RANGE, domain=1)
    for i in range(12):
        t = t0 + i * 100 * US
        if i % 4 == 0:
            rep.range(b, 200, t, t + 400 * US, text=f"ProfilerStep#{20 + i // 4}")
        if i == 6:  # asynchronous, no kernel: done 70 us after its enqueue
            rep.range(b, 200, t + 10 * US, t + 20 * US, registered=_msg(i, 0, async_op=True), domain=1)
            rep.mark(b, 200, t + 90 * US, registered=nvtx_format.format_done(nvtx_format.format_ident("all_reduce", 0, i)), domain=1)  # fmt: skip
            continue
        rep.range(b, 200, t + 10 * US, t + 60 * US, registered=_msg(i, 0), domain=1)
        _kernel(rep, b, 200, t + 20 * US, t + 100 * US)
    c = rep.process(300, "python3")
    for i in range(7):
        _kernel(rep, c, 300, t0 + i * 100 * US, t0 + i * 100 * US + 50 * US)
    write_sqlite(rep, path, seed=0)
    return t0


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def test_parts_give_the_rows_of_the_whole(tmp_path, monkeypatch):
    path = tmp_path / "parts.sqlite"
    t0 = _report(path)
    whole = extract.extract(path).calls
    made = []
    real_parts = nsys_calls._parts
    monkeypatch.setattr(nsys_calls, "_parts", lambda con, n: made.append(real_parts(con, n)) or made[-1])
    monkeypatch.setattr(nsys_calls, "PART_CALLS", 2)
    parts = extract.extract(path).calls
    assert len(made) == 1 and len(made[0]) > 10, "the report was not cut into parts"
    assert parts.schema == whole.schema
    assert _sorted(parts).equals(_sorted(whole))

    rows = sorted(parts.to_pylist(), key=lambda r: (r["pid"], r["source"], r["cpu_start"] or 0))
    a = [r for r in rows if r["pid"] == 100 and r["source"] == "wrapper"]
    # a label past step 0 in the last call: the wrapper's labels stay in every part
    assert [r["step"] for r in a] == [0] * 11 + [3]
    assert [r["kernels"] for r in a] == [i % 3 for i in range(12)]
    assert [r["joined"] for r in a] == [None] * 11 + [2]
    assert [r["source"] for r in rows if r["pid"] == 100].count("torch_range") == 3
    assert [r["source"] for r in rows if r["pid"] == 100].count("kernel_name") == 3
    b = [r for r in rows if r["pid"] == 200]
    # the window [t0 + 50 us, t0 + 1050 us] leaves out calls 0 and 11; no boundary seen: the
    # ProfilerStep#N ranges number the others
    assert [r["seq"] for r in b] == list(range(1, 11))
    assert [r["step"] for r in b] == [20, 20, 20, 21, 21, 21, 21, 22, 22, 22]
    done = next(r for r in b if r["seq"] == 6)
    assert (done["exec_start"], done["exec_end"]) == (t0 + 610 * US, t0 + 690 * US)
    c = [r for r in rows if r["pid"] == 300]
    assert [r["source"] for r in c] == ["kernel_name"] * 7


def test_duckdbs_memory_goes_back_before_each_part(tmp_path, monkeypatch):
    """What DuckDB's allocator kept of the work before a part (the lookups', the last part's) is
    handed back before the part is made, so that the parts' working memory is not added up."""
    path = tmp_path / "parts.sqlite"
    _report(path)
    made, events = [], []
    real_parts, real_release = nsys_calls._parts, duck.release_duckdb_memory
    monkeypatch.setattr(nsys_calls, "_parts", lambda con, n: made.append(real_parts(con, n)) or made[-1])
    monkeypatch.setattr(nsys_calls, "PART_CALLS", 2)
    monkeypatch.setattr(duck, "release_duckdb_memory", lambda con: events.append("release") or real_release(con))
    real_sql = duck.sql
    monkeypatch.setattr(duck, "sql", lambda name: events.append(name) or real_sql(name))
    extract.extract(path)
    at = events.index("calls_nsys")
    # the query is read once, then each part is made after a release
    assert events[at + 1 : at + 1 + len(made[0])] == ["release"] * len(made[0])
    assert len(made[0]) > 10


def test_the_step_is_chosen_after_the_lookups_are_let_go(tmp_path, monkeypatch):
    """The step, chosen once every part's calls are held, reads call_step_marks alone: the other
    lookups and the ranges the parts were cut from are dropped and DuckDB's memory handed back
    before it, so that its work is not added on top of them and of the last part's working
    memory; and it reads the parts still narrow, before the calls are made wide (every column
    but its three), so the wide calls are not held beside its work."""
    path = tmp_path / "parts.sqlite"
    _report(path)
    events, tables = [], []
    real_release, real_steps, real_widen = duck.release_duckdb_memory, nsys_calls._steps, nsys_calls.widen

    def steps(con, parts, wide):
        tables.append({t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()})
        events.append("steps")
        return real_steps(con, parts, wide)

    def widen(parts, schema):
        events.append("widen all" if "cpu_start" in schema.names else f"widen {','.join(schema.names)}")
        return real_widen(parts, schema)

    monkeypatch.setattr(nsys_calls, "PART_CALLS", 2)
    monkeypatch.setattr(duck, "release_duckdb_memory", lambda con: events.append("release") or real_release(con))
    monkeypatch.setattr(nsys_calls, "_steps", steps)
    monkeypatch.setattr(nsys_calls, "widen", widen)
    extract.extract(path)
    at = events.index("steps")
    assert events[at - 1] == "release"
    # the step's three columns widened for it, the whole calls only after it
    assert [e for e in events if e.startswith("widen")] == ["widen pid,step,p_step", "widen all"]
    assert events.index("widen all") > at
    assert "call_step_marks" in tables[0]
    assert not tables[0] & (set(nsys_calls._LOOKUPS) - {"call_step_marks"})
    assert not tables[0] & {"ranges", "held", "unheld", "range_threads"}


@pytest.mark.parametrize("part_calls", [2, 1 << 20])
def test_every_part_but_the_last_waits_narrow(tmp_path, monkeypatch, part_calls):
    """Each part's calls wait narrow while the next parts are made; the last part (the only one
    of a report of one part) has none made after it, so it is not narrowed and is made wide
    again as it is, without a copy: the same rows and types either way (the test above)."""
    path = tmp_path / "parts.sqlite"
    _report(path)
    made, narrowed, wide_last = [], [], []
    real_parts, real_narrow, real_widen = nsys_calls._parts, nsys_calls.narrow, nsys_calls.widen

    def widen(tables, schema):
        if "cpu_start" in schema.names:
            wide_last.append(tables[-1].schema == schema)
            last = [c for c in tables[-1].column("cpu_start").chunks if len(c)]
            out = real_widen(tables, schema)
            if last:  # the last part's column, not copied
                assert out.column("cpu_start").chunks[-1].buffers()[1].address == last[-1].buffers()[1].address
            return out
        return real_widen(tables, schema)

    monkeypatch.setattr(nsys_calls, "PART_CALLS", part_calls)
    monkeypatch.setattr(nsys_calls, "_parts", lambda con, n: made.append(real_parts(con, n)) or made[-1])
    monkeypatch.setattr(nsys_calls, "narrow", lambda t: narrowed.append(t.num_rows) or real_narrow(t))
    monkeypatch.setattr(nsys_calls, "widen", widen)
    calls = extract.extract(path).calls
    assert calls.num_rows == 35
    assert len(narrowed) == len(made[0]) - 1
    assert wide_last == [True]


@pytest.mark.parametrize("part_calls", [1, 3, 1 << 20])
def test_a_report_without_ranges_or_kernels_has_no_calls(tmp_path, monkeypatch, part_calls):
    """Nothing to cut: no calls, the columns of the whole."""
    rep = Report("empty.sqlite")
    p = rep.process(100, "python3")
    rep.mark(p, 100, 10, registered=nvtx_format.format_rank_marker(0, 0, 1, "h"), domain=1)
    write_sqlite(rep, tmp_path / "empty.sqlite", seed=0)
    monkeypatch.setattr(nsys_calls, "PART_CALLS", part_calls)
    calls = extract.extract(tmp_path / "empty.sqlite").calls
    assert calls.num_rows == 0 and "step" in calls.column_names and "p_step" not in calls.column_names
