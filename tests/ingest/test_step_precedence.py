"""Which step a call takes when both the wrapper's label and torch.profiler's ``ProfilerStep#N``
range number it, the same rule in Kineto traces (nsyscomm/ingest/kineto/profiler_steps.py) and
nsys reports (sql/calls_nsys.sql): the wrapper's step where it saw step boundaries in that
process (its step markers, or a label past step 0), else the range's. Generated traces and
reports with exact truth: the steps each call was made in."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pandas as pd

import nsyscomm
from nsyscomm import nvtx_format
from nsyscomm.duck import arrow_frame
from nsyscomm.ingest.kineto import trace as kineto
from tests.conftest import SAMPLES

PID = 300


def _x(name, ts, dur, tid=PID, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _call(step, ts, seq):
    msg = nvtx_format.format_collective(
        "all_reduce", api="all_reduce", bytes=4, dtype="float32", numel=1, pg=0, gsize=1, seq=seq, step=step
    )
    return _x(msg, ts, 10)


def _steps_of(tmp_path: Path, events: list) -> list[int | None]:
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": events}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    c = arrow_frame(kineto.extract(tmp_path / "t.json").calls).sort_values("cpu_start")
    return [None if s != s else int(s) for s in c["step"]]


def _profiled_loop(labels: list[int]) -> list:
    """Iterations 5, 6 and 7 of a program's profiler schedule, 1000 us each, one wrapped call in
    each (labelled labels[i] by the wrapper), and one call after the last iteration."""
    ev = [_x(f"ProfilerStep#{5 + i}", 1000 * (i + 1), 1000) for i in range(3)]
    ev += [_call(labels[i], 1000 * (i + 1) + 100, i + 1) for i in range(3)]
    return ev + [_call(labels[-1], 4500, 4)]


def test_without_step_boundaries_the_profiler_steps_apply(tmp_path):
    """No optimizer and no nsyscomm.step(): the wrapper labels every call step 0 and emits no
    step marker; the calls inside ProfilerStep#5..#7 take 5, 6, 7, the one after keeps 0."""
    assert _steps_of(tmp_path, _profiled_loop([0, 0, 0])) == [5, 6, 7, 0]


def test_step_markers_keep_the_wrappers_steps(tmp_path):
    """An optimizer's steps in the window (the wrapper's step markers): the wrapper's labels,
    0 included, win over the ranges' numbers, as before."""
    ev = _profiled_loop([0, 1, 2]) + [_x(nvtx_format.format_step_marker(i), 1000 * (i + 1) + 900, 0) for i in (1, 2)]
    assert _steps_of(tmp_path, ev) == [0, 1, 2, 2]
    marked_zero = _profiled_loop([0, 0, 0]) + [_x(nvtx_format.format_step_marker(0), 900, 0)]
    assert _steps_of(tmp_path, marked_zero) == [0, 0, 0, 0]  # nsyscomm.step(0): a step the user named


def test_a_label_past_step_0_is_a_boundary_seen(tmp_path):
    """The window opens after the wrapper's step markers (labels 3, 3, 4, no marker inside): the
    wrapper saw boundaries, so its steps stay."""
    assert _steps_of(tmp_path, _profiled_loop([3, 3, 4])) == [3, 3, 4, 4]


def test_a_process_without_boundaries_beside_one_with(tmp_path):
    """The rule is per process: a second process of the same trace whose wrapper saw steps keeps
    its labels while the first's calls take the ranges' numbers."""
    other = [dict(e, pid=PID + 1, tid=PID + 1) for e in _profiled_loop([4, 4, 4])]
    ev = _profiled_loop([0, 0, 0]) + other
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    c = arrow_frame(kineto.extract(tmp_path / "t.json").calls).sort_values(["pid", "cpu_start"])
    assert [(int(p), int(s)) for p, s in zip(c["pid"], c["step"])] == [(PID, 5), (PID, 6), (PID, 7), (PID, 0)] + [
        (PID + 1, 4)
    ] * 4


def _relabel(report: Path) -> None:
    """The report as the wrapper writes it for a program without an optimizer that runs its own
    torch.profiler: each step marker range becomes ProfilerStep#(N+10) and every call's label 0."""
    con = sqlite3.connect(report)
    for sid, value in con.execute("SELECT id, value FROM StringIds").fetchall():
        if value.startswith(nvtx_format.STEP_PREFIX + "|"):
            new = f"ProfilerStep#{int(nvtx_format.parse(value)['step']) + 10}"
        elif value.startswith(nvtx_format.COLLECTIVE_PREFIX):
            new = re.sub(r"\|step=[0-9]+\|", "|step=0|", value)
        else:
            continue
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (new, sid))
    con.commit()
    con.close()


def test_nsys_report_without_step_boundaries(tmp_path):
    """The same rule in nsys reports: the generated DDP job with its step markers turned into
    ProfilerStep#(N+10) ranges and its labels into 0: each call takes its true step + 10 (the
    generator's truth), per rank and step as many calls as the truth has."""
    report = tmp_path / "ddp.sqlite"
    shutil.copy(SAMPLES / "synthetic_ddp_4rank.sqlite", report)
    _relabel(report)
    col = nsyscomm.load(report).collectives
    truth = json.loads((SAMPLES / "synthetic_ddp_4rank.truth.json").read_text())["collectives"]
    want: dict = {}
    for row in truth:
        key = (row["rank"], None if row["step"] is None else row["step"] + 10)
        want[key] = want.get(key, 0) + 1
    got: dict = {}
    for r, s in zip(col["rank"], col["step"]):
        key = (int(r), None if pd.isna(s) else int(s))
        got[key] = got.get(key, 0) + 1
    assert got == want


def test_nsys_report_with_step_markers_keeps_the_wrappers_steps(tmp_path):
    """Step markers in the report: a ProfilerStep#40 range over every call changes none of the
    wrapper's labels; the calls it left unlabelled (made before its annotate) take 40."""
    report = tmp_path / "ddp.sqlite"
    shutil.copy(SAMPLES / "synthetic_ddp_4rank.sqlite", report)
    before = nsyscomm.load(report).collectives
    con = sqlite3.connect(report)
    con.execute("INSERT INTO StringIds (id, value) VALUES (99999, 'ProfilerStep#40')")
    con.execute(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, textId, globalTid, domainId) '
        'SELECT min(start) - 1, max("end") + 1, 59, 99999, globalTid, 0 FROM NVTX_EVENTS GROUP BY globalTid'
    )
    con.commit()
    con.close()
    after = nsyscomm.load(report).collectives

    def steps(col):
        return [None if pd.isna(s) else int(s) for s in col.sort_values(["rank", "cpu_start"])["step"]]

    assert len(before) == len(after) and len(set(steps(before))) > 2
    assert steps(after) == [40 if s is None else s for s in steps(before)]
