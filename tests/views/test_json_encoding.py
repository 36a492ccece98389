"""The JSON view's encoder (views/json_out.indented) writes what json.dumps(indent=2,
allow_nan=False) writes, character for character, and refuses what it refuses; and the
document's rows made a column at a time (analyses/contract.records) hold the values the rows
made one by one held."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pandas as pd
import pytest

from nsyscomm.analyses import contract
from nsyscomm.views import json_out
from tests.conftest import SAMPLES, loaded


def _reference(doc) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


SCALARS = [
    0,
    -1,
    2**70,
    1.5,
    -0.0,
    1e300,
    5e-324,
    0.1 + 0.2,
    True,
    False,
    None,
    "",
    "x",
    'q"\\/\n\t\u00e9\u2028\U0001f600',
]


def _random_value(rng: random.Random, depth: int):
    roll = rng.random()
    if depth >= 4 or roll < 0.5:
        return rng.choice(SCALARS + [np.float64(rng.random()), rng.randint(-(10**6), 10**6), rng.random() * 1e9])
    if roll < 0.75:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.8:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3)))
    keys = ["a", "b c", "\u00e9", "", 7, 2.5, True, False, None]
    return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def test_indented_writes_what_json_writes():
    rng = random.Random(20261129)
    for _ in range(500):
        doc = _random_value(rng, 0)
        assert json_out.indented(doc) == _reference(doc)
    for doc in ({}, [], {"a": []}, {"a": {}}, [[]], [{}], {2: 1, 1.5: 2, True: 3, None: 4}):
        assert json_out.indented(doc) == _reference(doc)


@pytest.mark.parametrize(
    "bad",
    [math.nan, [math.inf], {"a": -math.inf}, {math.nan: 1}, np.int64(3), {"a": object()}, {(1,): 2}, {"a": {1, 2}}],
)
def test_indented_refuses_what_json_refuses(bad):
    with pytest.raises((ValueError, TypeError)) as ours:
        json_out.indented(bad)
    with pytest.raises((ValueError, TypeError)) as theirs:
        _reference(bad)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def test_a_samples_document_is_written_as_json_writes_it():
    result = loaded(str(SAMPLES / "synthetic_fsdp_8rank.sqlite"))
    doc = json_out.document(result)
    assert json_out.indented(doc) == _reference(doc)
    assert json.loads(json_out.dumps(result)) == json.loads(_reference(doc))


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
    assert _reference(got) == _reference(want)
    assert contract.records(df, ["absent"]) == [{}, {}, {}]
    assert contract.records(df.iloc[0:0], keys) == []
