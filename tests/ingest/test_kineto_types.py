"""A Kineto trace's calls keep the collectives table's integer types where some rows have no
value: an asynchronous call that gloo's own range times beside one it does not leaves exec_start
NULL on the second, and the column must stay a 64-bit integer (exact nanoseconds since the
epoch, and a type the bounds check of nsyscomm.ingest.limits reads). Generated traces with
exact truth."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from nsyscomm import nvtx_format
from nsyscomm.duck import arrow_frame
from nsyscomm.extract import readers


def _x(name, cat, ts, dur, pid, tid):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _async(op: str, seq: int) -> str:
    return nvtx_format.format_collective(
        op, api=op, bytes=4, dtype="float32", numel=1, pg=0, gsize=1, seq=seq, async_op=True
    )


def test_async_calls_partly_paired_keep_exact_integer_times(tmp_path: Path):
    """Only the all_reduce has gloo's range (a ZeroRedundancyOptimizer's step under
    torch.profiler pairs some ops and not others): the report reads, its paired span is exact
    to the nanosecond, the unpaired call's is NULL."""
    pid, base = 300, 1_700_000_000_000_000  # µs since the epoch, as Kineto writes them
    ev = [
        _x(_async("all_reduce", 1), "user_annotation", base + 100, 5, pid, pid),
        _x("gloo:all_reduce", "user_annotation", base + 110, 7, pid, pid + 1),
        _x(_async("broadcast", 2), "user_annotation", base + 200, 5, pid, pid),  # no gloo:broadcast
    ]
    path = tmp_path / "partly.json"
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    e = readers.extract_one(path, path.name, 1)
    assert e.calls.schema.field("exec_start").type == pa.int64()
    c = arrow_frame(e.calls).sort_values("cpu_start")
    assert list(c["op"]) == ["all_reduce", "broadcast"]
    assert c["exec_start"].iloc[0] == (base + 110) * 1000
    assert c["exec_end"].iloc[0] == (base + 117) * 1000
    assert pd.isna(c["exec_start"].iloc[1])
