"""Arrow tables of calls held as few bytes as their values take, while they wait for the next step.

A calls table as DuckDB hands it over is wide: every text column a string a row though a report's
calls share a handful of ops, apis, kernels and sources, every integer 64 bits, every column of
no values a buffer of zeros. narrow() keeps the same values in fewer bytes (about a third at
800k calls); widen() gives the table back exactly as it was, or a reader that casts (DuckDB's,
through the normalized table's types) reads the narrow one as it is.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# Both tables in the system's allocator, as DuckDB hands its tables over: pyarrow's own (mimalloc)
# would keep their memory once they are freed, where the next stages' DuckDB queries cannot take
# it and nsyscomm.duck.release_duckdb_memory, which hands the system allocator's back, does not
# reach it.
_POOL = pa.system_memory_pool


def narrow(calls: pa.Table) -> pa.Table:
    """calls, the same values in fewer bytes: a text column dictionary-encoded where that is
    smaller, an int64 column whose values fit 32 bits as int32, a column of no values as Arrow's
    null type (no buffers); every other column copied."""
    pool = _POOL()
    cols = []
    for f, kept in zip(calls.schema, calls.columns):
        c = kept
        if c.null_count == len(c) and len(c):
            c = pa.nulls(len(c), memory_pool=pool)
        elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            c = _dictionary(c, pool)
        elif f.type == pa.int64():
            lo, hi = pc.min_max(c).values()
            if lo.is_valid and -(1 << 31) <= lo.as_py() and hi.as_py() < 1 << 31:
                c = pc.cast(c, pa.int32(), memory_pool=pool)
        if c is kept:
            # a copy even where the column is kept as it is: each column DuckDB exports holds
            # every column of its batch (one release of the batch's memory), so one kept as it is
            # would keep the wide rows whole. Chunk by chunk: DuckDB scans an Arrow table's
            # batches in parallel, and one chunk would be one batch
            c = pa.chunked_array([pa.concat_arrays([chunk], memory_pool=pool) for chunk in c.chunks], type=c.type)
        cols.append(c)
    return pa.table(cols, names=calls.column_names)


def _dictionary(c: pa.ChunkedArray, pool: pa.MemoryPool) -> pa.ChunkedArray:
    """c dictionary-encoded, with the narrowest index its values allow, where that is smaller."""
    d = pc.dictionary_encode(c, memory_pool=pool)
    values = len(d.chunk(0).dictionary) if d.num_chunks else 0
    index = next(
        t for t, bits in ((pa.int8(), 7), (pa.int16(), 15), (pa.int32(), 31)) if values < 1 << bits or bits == 31
    )
    if index != pa.int32():
        d = pc.cast(d, pa.dictionary(index, d.type.value_type), memory_pool=pool)
    return d if d.nbytes < c.nbytes else c


def widen(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """Narrowed tables (narrow()) back to schema, the one they had, put end to end. A column at
    a time, each let go of in the narrow tables once widened (the list's tables are replaced by
    ones without it): the narrow columns are not held beside the whole wide table."""
    pool = _POOL()
    cols = []
    for f in schema:
        chunks = []
        for i, t in enumerate(tables):
            chunks.extend(pc.cast(t.column(0), f.type, memory_pool=pool).chunks)
            tables[i] = t.remove_column(0)
        cols.append(pa.chunked_array(chunks, type=f.type))
    return pa.table(cols, schema=schema)
