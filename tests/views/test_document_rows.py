"""The document's rows made a column at a time (analyses/contract.records) hold the values the
rows made one by one held."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from nsyscomm.analyses import contract


def _rows_one_by_one(df: pd.DataFrame, keys) -> list[dict]:  # how records() made them before
    cols = [k for k in keys if k in df.columns]
    return [{k: contract._clean(row[k], k) for k in cols} for row in df[cols].to_dict("records")]


def test_records_hold_the_values_of_rows_made_one_by_one():
    df = pd.DataFrame(
        {
            "rank": np.array([0, 1, 2], dtype="int32"),
            "calls": pd.array([1, None, 3], dtype="Int64"),
            "bytes": [1.0, 2.0, math.nan],  # an integer key held as floats
            "op": pd.array(["a", None, "c"], dtype="string"),
            "caller": ["x", None, math.nan],
            "total_ms": [0.5, math.inf, -math.inf],
            "joined": [True, False, True],
            "flag": pd.array([True, None, False], dtype="boolean"),
        }
    )
    keys = ["op", "rank", "calls", "bytes", "caller", "total_ms", "joined", "flag", "absent"]
    got = contract.records(df, keys)
    want = _rows_one_by_one(df, keys)
    assert got == want
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in want]
    assert json.dumps(got, allow_nan=False) == json.dumps(want, allow_nan=False)
    assert contract.records(df, ["absent"]) == [{}, {}, {}]
    assert contract.records(df.iloc[0:0], keys) == []
