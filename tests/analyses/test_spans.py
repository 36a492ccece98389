"""The unions of spans made in numpy (nsyscomm/analyses/spans.py) give what SQL's window gives:
each row's part, greatest(0, end - greatest(start, the max end of the rows before it in its
partition)), summed per partition, with NULL keys, starts and ends, ties and nested spans; and
the view's five queries (ranks, steady_ranks, skew, steps, dimensions) give the rows of their
one-query form, the parts made by that window, on the samples and the real exports."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from nsyscomm import duck
from nsyscomm.analyses import spans
from tests.conftest import REAL, SAMPLES, loaded

# each part as the one-query form made it, per partition in (start, second key) order
WINDOW_PART = "greatest(0, {e} - greatest({s}, coalesce(max({e}) OVER w, {s})))"


def _window(unions: spans.Unions, rows: str) -> str:
    parts = ", ".join(f"{WINDOW_PART.format(s=s, e=e)} AS {name}" for name, (s, e) in unions.parts.items())
    by = ", ".join(f'"{c}"' for c in unions.by)
    order = ", ".join(unions.order)
    return (
        f"SELECT *, {parts} FROM ({rows}) "
        f"WINDOW w AS (PARTITION BY {by} ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    )


def _one_query(name: str) -> str:
    """sql/<name>.sql with its rows' parts made by SQL's window, as one query."""
    rows = re.sub(r"--[^\n]*", "", duck.sql(f"{name}_spans"))
    window = f"spans AS ({_window(spans.UNIONS[name], rows)})"
    text = re.sub(r"--[^\n]*", "", duck.sql(name)).strip()
    return re.sub(r"^WITH\b", f"WITH {window},", text) if text.startswith("WITH") else f"WITH {window} {text}"


def _random_rows(seed: int, n: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    s = rng.integers(-1_000, 1_000, n)  # times before the epoch too: a NULL start is no 0
    e = s + rng.integers(-50, 400, n)  # some end before they start
    we = s + rng.integers(0, 300, n)
    rank = rng.integers(0, 4, n)
    group = rng.choice(["a", "b", "c"], n)

    def nulls(values, p):
        return pa.array(values, mask=rng.random(n) < p)

    return pa.table(
        {
            "rank": nulls(rank, 0.05),
            "group": nulls(group, 0.05),
            "s": nulls(s, 0.05),
            "e": nulls(e, 0.1),
            "we": nulls(we, 0.1),
        }
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "unions",
    [
        spans.Unions(("rank",), ("s", "e"), {"comm": ("s", "e"), "wait": ("s", "we")}),
        spans.Unions(("group", "rank"), ("s", "we"), {"wait": ("s", "we")}),
    ],
    ids=["by_rank", "by_group_and_rank"],
)
def test_the_parts_sum_as_the_window_sums_them(seed, unions):
    rows = _random_rows(seed, 400)
    con = duck.connect()
    try:
        con.register("rows_in", rows)
        con.register("with_parts", spans.with_parts(rows, unions))
        by = ", ".join(f'"{c}"' for c in unions.by)
        sums = ", ".join(f"sum({name}) AS {name}" for name in unions.parts)
        want = con.execute(
            f"SELECT {by}, {sums}, count(*) FROM ({_window(unions, 'SELECT * FROM rows_in')}) GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        got = con.execute(f"SELECT {by}, {sums}, count(*) FROM with_parts GROUP BY ALL ORDER BY ALL").fetchall()
        # not vacuous: spans overlap, so the union is shorter than the spans' sum
        overlap = con.execute("SELECT sum(greatest(e - s, 0)) FROM rows_in").fetchone()[0]
    finally:
        con.close()
    assert got == want
    assert sum(r[len(unions.by)] for r in got) < overlap


def test_no_rows_and_one_partition_of_nulls():
    unions = spans.Unions(("rank",), ("s", "e"), {"comm": ("s", "e")})
    empty = pa.table({c: pa.array([], pa.int64()) for c in ("rank", "s", "e")})
    assert spans.with_parts(empty, unions)["comm"].to_pylist() == []
    # a NULL rank is a partition of its own; a NULL start with no end before it adds nothing
    nulls = pa.table({c: pa.array(v, pa.int64()) for c, v in (("rank", [None, None]), ("s", [5, None]), ("e", [9, 3]))})
    assert spans.with_parts(nulls, unions)["comm"].to_pylist() == [4, 0]


INPUTS = [
    SAMPLES / "synthetic_ddp_4rank.sqlite",
    SAMPLES / "synthetic_fsdp_8rank.sqlite",
    SAMPLES / "synthetic_gloo_cpu.sqlite",
    SAMPLES / "synthetic_nowrapper_2node",
    REAL / "nsys" / "nsys2026.2_2xH100_nccl_window.sqlite",
    REAL / "nsys" / "nsys2025.3_1xH100_nccl2.28_run_light.sqlite",
]
PARAMS = {"steady_ranks": {"warmup": ""}}


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_the_view_queries_give_the_rows_of_their_one_query_form(path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    con = loaded(path).con
    for name in spans.UNIONS:
        params = PARAMS.get(name)
        got = spans.query(con, name, params).to_pylist()
        want = con.execute(_one_query(name), params).to_arrow_table().to_pylist()
        assert got == want, name
        assert got or name != "ranks", name


@pytest.mark.parametrize("seed", range(4))
def test_the_running_max_in_bands_is_the_running_max_per_group(seed):
    """max_before lifts each group above the ones before it; values too far apart for 64-bit bands
    (the second half of these) take pandas' running max per group: both give the same."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(1, 80))
        span = 10 ** int(rng.integers(1, 19))
        v = rng.integers(-span, span, n)
        null = rng.random(n) < rng.random()
        first = rng.random(n) < 0.2
        first[0] = True
        got, got_none = spans.max_before(v, null, first)
        want, want_none = spans._max_before_by_group(v, null, first)
        assert (got_none == want_none).all() and (got == want).all()
