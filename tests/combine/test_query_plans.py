"""How the job's queries run, not only what they give (their figures are the samples' truth and
the goldens): a window function sorts every column it carries, so the windows over every call
carry the few columns they read; sql/call_spans.sql sends each call through the window of its
own queue only; the union of a rank's spans takes one sort for its comm and its wait. Checked
on DuckDB's profile of each query over the bundled samples."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

import nsyscomm
from nsyscomm import duck
from nsyscomm.combine.calls import SELECT_NEEDS, JobCalls, Needs
from nsyscomm.discover import sample_jobs

# columns of the wide rows that no window of sql/call_spans.sql reads
WIDE_ONLY = {"caller", "kernel", "algo", "proto", "dtype", "group_ranks", "busy_at_start", "busy_at_end"}
# ... and that sql/call_spans.sql's queue windows need not sort either: the columns of the span that
# are not the queue's partition, order or x_end join back by call_id
QUEUE_WIDE_ONLY = WIDE_ONLY | {"group_size", "sender", "receiver", "msg", "tid", "api", "init_ns", "peer"}
# ... and of sql/late_arrivals.sql's window over every call (the late collectives' calls take them)
LATE_WIDE_ONLY = {"caller", "source", "report", "tid", "device", "busy_at_start"}
# ... and of sql/logical_collectives.sql's window over every call (the aggregate reads them)
LOGICAL_WIDE_ONLY = {"caller", "op", "bytes", "group_size", "step", "duration_ns", "init_ns", "cpu_end", "joined"}


def _operators(node):
    yield node
    for child in node.get("children", []):
        yield from _operators(child)


def _profile(con, tmp_path, name="call_spans", params=None, operator="WINDOW"):
    """The operators of the named query's run whose name holds `operator` (WINDOW by default);
    sql/call_spans.sql with every part on (Needs()) unless params say otherwise."""
    if name == "call_spans" and params is None:
        params = asdict(Needs())
    out = tmp_path / "profile.json"
    con.execute("PRAGMA enable_profiling = 'json'")
    con.execute(f"PRAGMA profiling_output = '{out}'")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE query_again AS {duck.sql(name)}", params)
    finally:
        con.execute("PRAGMA disable_profiling")
    return [op for op in _operators(json.loads(out.read_text())) if operator in (op.get("operator_name") or "")]


def _projections(op) -> list[str]:
    got = (op.get("extra_info") or {}).get("Projections") or []
    return [got] if isinstance(got, str) else list(got)


def _carried(window) -> set:
    """The columns the operators under a window project."""
    return {c for op in _operators(window) for c in _projections(op)}


@pytest.fixture(scope="module", params=[0, 2], ids=["nccl_streams", "gloo_groups"])
def sample(request):
    # the job keeps its calls (combine lets them go once the collectives table holds them), so
    # that sql/call_spans.sql can run again over them
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(JobCalls, "release", lambda self: None)
        result = nsyscomm.load(sample_jobs()[request.param], cache=False)
    result.is_streams = request.param == 0
    return result


def test_each_call_goes_through_the_window_of_its_own_queue_only(sample, tmp_path):
    queued = duck.scalar(
        sample.con,
        "SELECT count(*) FROM collectives WHERE gpu_start IS NOT NULL "
        "OR (source = 'wrapper' AND \"group\" IS NOT NULL AND op NOT IN ('send', 'recv'))",
    )
    windows = _profile(sample.con, tmp_path)
    assert queued and windows
    # every call of these samples has its sequence number: no numbering window runs, and each
    # call with a queue (a stream, a gloo group) runs through that queue's window once
    assert sum(int(w["operator_cardinality"]) for w in windows) == queued


@pytest.mark.parametrize(
    "name, params, over_calls, wide",
    [
        ("call_spans", None, "", WIDE_ONLY),
        # (its other windows number a thread's host events)
        ("late_arrivals", {"noise_ns": 100_000}, "PARTITION BY rank ORDER BY exec_start", LATE_WIDE_ONLY),
        ("logical_collectives", None, "LAG(exec_start)", LOGICAL_WIDE_ONLY),
    ],
)
def test_the_windows_over_every_call_carry_the_columns_they_read_only(sample, tmp_path, name, params, over_calls, wide):
    windows = [w for w in _profile(sample.con, tmp_path, name, params) if over_calls in " ".join(_projections(w))]
    assert windows
    for w in windows:
        assert not _carried(w) & wide, (name, w["extra_info"], _carried(w) & wide)


def test_the_spans_windows_sort_narrow_rows_and_no_call_is_stored(sample, tmp_path):
    """sql/call_spans.sql's queue windows carry each call's number, partition, order and end only
    (the rest joins back by call_id), and the query stores no CTE of every call: DuckDB stores a
    CTE read twice whole, every column of every call. Only the narrow rows of the calls numbered
    by order and of the point-to-point calls are stored."""
    ctes = _profile(sample.con, tmp_path, operator="CTE")
    stored = {(op.get("extra_info") or {}).get("CTE Name") for op in ctes if op["operator_name"] == "CTE"}
    assert stored == {"by_order", "p2p"}
    queues = [w for w in _profile(sample.con, tmp_path) if "x_end" in " ".join(_projections(w))]
    assert len(queues) == 2  # a stream's, a gloo group's
    for w in queues:
        assert not _carried(w) & QUEUE_WIDE_ONLY, _carried(w) & QUEUE_WIDE_ONLY


@pytest.mark.parametrize(
    "name, params",
    [("ranks", None), ("steady_ranks", {"warmup": ""}), ("dimensions", None)],
)
def test_a_union_of_spans_takes_one_sort_for_comm_and_wait(sample, tmp_path, name, params):
    assert len(_profile(sample.con, tmp_path, name, params)) == 1


def test_the_hang_calls_look_the_records_up_without_holding_every_call(sample, tmp_path):
    """sql/hang_calls.sql leaves out the calls the flight records hold by a join on the records,
    not by a correlated NOT EXISTS, which DuckDB plans as a delim join: that holds every call's
    columns before it looks them up."""
    from nsyscomm.analyses import hang

    cur = sample.con.cursor()
    try:
        cur.register("hang_records_df", hang.read_dumps([]))
        cols = ", ".join(f'"{c}"::{t} AS "{c}"' for c, t in hang._RECORD_TYPES.items())
        cur.execute(f"CREATE OR REPLACE TEMP TABLE hang_records AS SELECT {cols} FROM hang_records_df")
        assert _profile(cur, tmp_path, "hang_calls", operator="JOIN")
        assert not _profile(cur, tmp_path, "hang_calls", operator="DELIM")
    finally:
        cur.close()


def test_the_spans_query_reads_the_calls_for_the_parts_they_need_only(sample, tmp_path):
    """The windows' query runs no numbering, message or gloo-queue window where no call of the
    job needs it (calls.Needs, counted in combine's first scan of the calls), and gives the same
    rows as with every part on."""
    needs = Needs(*duck.one_row(sample.con, f"SELECT {SELECT_NEEDS} FROM calls_typed"))
    assert needs == (Needs(False, False, True, False) if sample.is_streams else Needs(False, False, False, True))
    windows = _profile(sample.con, tmp_path, params=asdict(needs))
    assert len(windows) == 1  # its calls' queue's: a stream's, or a gloo group's
    rows = {}
    for name, params in (("needed", asdict(needs)), ("all", asdict(Needs()))):
        sample.con.execute(f"CREATE OR REPLACE TEMP TABLE spans_{name} AS {duck.sql('call_spans')}", params)
    for a, b in (("needed", "all"), ("all", "needed")):
        rows[a] = duck.scalar(sample.con, f"SELECT count(*) FROM (FROM spans_{a} EXCEPT ALL FROM spans_{b})")
    assert rows == {"needed": 0, "all": 0}
    assert duck.scalar(sample.con, "SELECT count(*) FROM spans_all") == duck.scalar(
        sample.con, "SELECT count(*) FROM collectives"
    )
