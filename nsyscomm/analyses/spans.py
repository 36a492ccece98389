"""The time a rank had at least one call in flight (or waiting): the length of the union of its
calls' spans, per rank, per rank and step, or per rank and communicator, made in numpy for the
queries of sql/ that sum it (ranks, steady_ranks, skew, steps, dimensions).

Such a query is in two parts: sql/<name>_spans.sql gives its rows (the partition's keys, each
row's span or spans and the columns its aggregate reads), numpy adds to each row its part of
each union, and sql/<name>.sql sums the parts, reading the rows as the relation `spans`. A
row's part is what of its span the spans of its partition that began before it do not cover,
greatest(0, end - greatest(start, the latest end before it)), in (start, second key) order per
partition, NULLs last, as SQL's window would give it; these parts are disjoint and cover the
union, whose length does not depend on the order of spans that start together. DuckDB's window
(a max over the preceding rows per partition) took several times the CPU this takes: a sort per
query and a segment tree per span, for each of the view's five queries.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from nsyscomm import duck


@dataclass(frozen=True)
class Unions:
    """How a query's rows are cut into partitions and which unions it sums."""

    by: tuple[str, ...]  # the partition's key columns (NULL: a key of its own, as in SQL)
    order: tuple[str, str]  # the rows' order within a partition: their start, then this column
    parts: dict[str, tuple[str, str]]  # the part's column -> (start column, end column) of its spans


_ONE_PASS = threading.Lock()

# the queries whose unions are made here
UNIONS = {
    "ranks": Unions(("rank",), ("s", "e"), {"comm_ns": ("s", "e"), "wait_ns": ("s", "we")}),
    "steady_ranks": Unions(("rank",), ("s", "e"), {"comm_part": ("s", "e"), "wait_part": ("s", "we")}),
    "skew": Unions(("rank",), ("s", "we"), {"wait_ns": ("s", "we")}),
    "steps": Unions(("step", "rank"), ("s", "e"), {"ns": ("s", "e")}),
    "dimensions": Unions(("group", "rank"), ("s", "e"), {"comm_ns": ("s", "e"), "wait_ns": ("s", "we")}),
}


def query(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> pa.Table:
    """The rows of sql/<name>.sql (its parameters: params) as an Arrow table; for a query of
    UNIONS, its rows' query, their parts, then its aggregate over them."""
    unions = UNIONS.get(name)
    if unions is None:
        return con.execute(duck.sql(name), params or None).to_arrow_table()
    rows = con.execute(duck.sql(f"{name}_spans"), params or None).to_arrow_table()
    # a relation of this connection alone: the view's cursors each register their own
    con.register("spans", with_parts(rows, unions))
    del rows
    try:
        return con.execute(duck.sql(name)).to_arrow_table()
    finally:
        con.unregister("spans")
        _trim()


def _trim() -> None:
    """Hand back to the system the memory the pass's arrays freed. glibc's malloc raises its
    threshold for mapping a block of its own after the first such block is freed, so the arrays
    of the passes after come from each thread's heap, which keeps them once freed: the view's
    peak rose by the arrays of several passes on several threads (docs/performance.md)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to hand back this way
        ctypes.CDLL(None).malloc_trim(0)


def with_parts(rows: pa.Table, unions: Unions) -> pa.Table:
    """rows with a column per union of `unions`: each row's part of it (BIGINT, never NULL).

    One query's pass at a time (_ONE_PASS): the view runs these queries on several cursors at
    once, and each pass holds a few arrays of every row at its peak; in place where it can."""
    with _ONE_PASS:
        n = rows.num_rows
        keys = [k for col in unions.by for k in key_arrays(rows[col])]
        # per partition, (start, second key) order, NULLs last (np.lexsort: the last key sorts first)
        order_keys = [k for col in unions.order for k in reversed(key_arrays(rows[col]))]
        order = np.lexsort([*reversed(order_keys), *keys]) if n else np.zeros(0, np.int64)
        del order_keys
        first = np.arange(n) == 0
        for k in keys:
            k = k[order]
            first[1:] |= k[1:] != k[:-1]
        del keys, k
        back = np.empty_like(order)
        back[order] = np.arange(n)
        for name, (start, end) in unions.parts.items():
            e, e_null = (a[order] for a in ints(rows[end]))
            before, none_before = max_before(e, e_null, first)
            s, s_null = (a[order] for a in ints(rows[start]))
            # greatest(start, latest end before), NULLs passed over as SQL's greatest does: NULL
            # only when both are; then the part, greatest(0, end - that)
            np.maximum(s, before, out=before, where=~none_before & ~s_null)
            np.copyto(before, s, where=none_before & ~s_null)
            np.subtract(e, before, out=e)
            np.maximum(e, 0, out=e)
            e[e_null | (s_null & none_before)] = 0
            del s, s_null, before, none_before
            rows = rows.append_column(name, pa.array(e[back], type=pa.int64()))
            del e, e_null
        return rows


def key_arrays(col: pa.ChunkedArray) -> list[np.ndarray]:
    """A key column as arrays that tell its values apart, NULL one value of its own: an integer
    column's values, then where it is NULL (where it holds any), which sort as SQL sorts them
    (NULLs last); another column's codes, in no particular order (a partition's key only)."""
    if not pa.types.is_integer(col.type):
        encoded = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")
        return [encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    values, null = ints(col)
    return [values, null] if col.null_count else [values]


def ints(col: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (0 where NULL) and its NULL mask."""
    if not col.null_count:
        return col.to_numpy().astype(np.int64, copy=False), np.zeros(len(col), bool)
    return (pc.fill_null(col, 0).to_numpy().astype(np.int64, copy=False), col.is_null().to_numpy(zero_copy_only=False))


def groups(keys: list[np.ndarray]) -> np.ndarray:
    """Rows -> a number per distinct combination of the key columns (exact: no hashing)."""
    g = np.zeros(len(keys[0]), np.int64)
    for k in keys:
        codes, uniques = pd.factorize(k)
        g = pd.factorize(g * len(uniques) + codes)[0]
    return g


def max_before(v: np.ndarray, null: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the largest non-NULL v of the rows before it in its group (rows sorted by group,
    first: where a group starts), and where there is none.

    One running max over all rows: each group's values are lifted above every earlier group's
    (each group a band of its own, wide enough for the values' range, a NULL at the band's
    floor), so that the running max starts afresh in each group; where the bands would not fit
    in 64 bits, a running max per group by pandas."""
    low = np.iinfo(np.int64).min
    n = len(v)
    known = v[~null]
    if not len(known):
        return np.full(n, low), np.ones(n, bool)
    floor = int(known.min())
    width = int(known.max()) - floor + 2
    del known
    band = np.cumsum(first, dtype=np.int64)
    band -= 1
    if (int(band[-1]) + 1) * width >= 2**62:
        return _max_before_by_group(v, null, first)
    band *= width
    lifted = v - (floor - 1)
    lifted += band
    np.copyto(lifted, band, where=null)
    np.maximum.accumulate(lifted, out=lifted)
    before = np.empty(n, np.int64)
    before[0] = band[0]
    before[1:] = lifted[:-1]
    del lifted
    none = first | (before == band)
    before -= band
    before += floor - 1
    before[none] = low
    return before, none


def _max_before_by_group(v: np.ndarray, null: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """max_before() by pandas' running max per group."""
    low = np.iinfo(np.int64).min
    running = pd.Series(np.where(null, low, v)).groupby(np.cumsum(first)).cummax().to_numpy()
    before = np.empty_like(running)
    before[:1] = low
    before[1:] = running[:-1]
    before[first] = low
    return before, before == low
