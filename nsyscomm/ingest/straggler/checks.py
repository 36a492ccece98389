"""The edge of the what-if trace format: a ``trace-<name>.parquet`` checked before and
after it is read, so that nothing past nsyscomm.ingest.straggler.trace sees a null or NaN rank,
an infinite duration or a time whose nanoseconds overflow 64 bits.

Before: the Parquet footer (rows, the column data's size once decompressed, the column types)
against the memory budget (nsyscomm.ingest.limits.budget), so that a small file that would
inflate into gigabytes is refused without inflating it. After: nulls, integers, finite times and
every value's range, the ranks and stages against the job description. The limits are stated in
docs/limits.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nsyscomm.errors import InputError
from nsyscomm.ingest import limits, paths

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

TIME_COLUMNS = ("start_ts", "duration")
STRING_COLUMNS = ("optype",)
# Memory one row costs from the read through the replay (the trace, its pandas frame, the
# dependency graph and the replays' arrays); docs/limits.md says how it was measured
ROW_BYTES = 2048
# Each byte of column data is held about this many times (Parquet pages, Arrow, pandas)
DATA_COPIES = 4
MAX_SECONDS = 1e7  # one op's start within its step, or its duration: 115 days
MAX_JOB_SECONDS = 1e8  # the sampled steps end to end (their nanoseconds stay far below 2**63)
MAX_OPTYPE = 256  # the artifact's op types are names like "forward-compute"
# integer columns: (lowest, highest) allowed; rank, dp_rank and stage are checked against the meta
_INT_RANGES = {
    "dp_rank": (0, limits.MAX_GROUP - 1),
    "stage": (0, limits.MAX_GROUP - 1),
    "rank": (0, limits.MAX_GROUP - 1),
    "step": (0, (1 << 40) - 1),
    "mc": (-1, (1 << 31) - 1),
    "mb_id": (-1, (1 << 31) - 1),
    "gmc": (-1, (1 << 31) - 1),
}
_FIX = "write the trace again (the artifact's format: docs/whatif.md)"


def read_table(path: Path, columns: tuple[str, ...]) -> pa.Table:
    """The trace's columns as Arrow, after its footer was checked against the budget; optype
    kept dictionary-encoded (one copy of each distinct name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(paths.arrow_source(path))
        md, schema = pf.metadata, pf.schema_arrow
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a readable Parquet file ({_first(e)}); {_FIX}") from None
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; the what-if trace format needs {', '.join(columns)}"
        )
    for c in columns:
        _check_type(path, c, schema.field(c).type)
    if md.num_rows == 0:
        raise InputError(f"{path}: the trace has no operations")
    err = limits.over_budget(path, "operations in the trace", md.num_rows, ROW_BYTES)
    if err:
        raise err
    wanted = set(columns)
    data = 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            col = rg.column(i)
            if col.path_in_schema.split(".")[0] in wanted:
                data += max(col.total_uncompressed_size, 0)
    err = limits.over_budget(path, "bytes of column data once decompressed", data, DATA_COPIES)
    if err:
        raise err
    try:
        pf = pq.ParquetFile(paths.arrow_source(path), read_dictionary=[c for c in STRING_COLUMNS if c in wanted])
        return pf.read(columns=list(columns), use_threads=False)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a readable Parquet file ({_first(e)}); {_FIX}") from None


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def _check_type(path: Path, col: str, t: pa.DataType) -> None:
    import pyarrow as pa

    if col in STRING_COLUMNS:
        vt = t.value_type if pa.types.is_dictionary(t) else t
        ok = pa.types.is_string(vt) or pa.types.is_large_string(vt)
        want = "strings"
    elif col in TIME_COLUMNS:
        ok = pa.types.is_floating(t) or pa.types.is_integer(t)
        want = "numbers of seconds"
    else:
        ok = pa.types.is_floating(t) or pa.types.is_integer(t)
        want = "integers"
    if not ok:
        raise InputError(f"{path}: column {col} holds {t}, not {want}; {_FIX}")


def checked(df: pd.DataFrame, meta: dict, path: Path, seq_stride: int) -> pd.DataFrame:
    """df with every value checked (InputError naming the column and the fix otherwise); integer
    columns stored as floats become int64."""
    n = len(df)
    for col in df.columns:
        nulls = int(df[col].isna().sum())
        if nulls:
            raise InputError(f"{path}: {nulls} of {n} operation(s) have no {col} (null or NaN); {_FIX}")
    ranges = dict(_INT_RANGES)
    ranges["seq_id"] = (0, seq_stride - 1)  # seq numbers a call within its optype and step
    ranges["dp_rank"] = (0, meta["dp_size"] - 1)
    ranges["stage"] = (0, meta["pp_size"] - 1)
    for col, (lo, hi) in ranges.items():
        v = df[col].to_numpy()
        if v.dtype.kind == "f":
            bad = ~np.isfinite(v) | (v != np.round(v))
            if bad.any():
                raise InputError(f"{path}: column {col} holds {_shown(v[bad][0])}, not an integer; {_FIX}")
            within = (v >= lo) & (v <= hi)
            if within.all():
                df[col] = v.astype(np.int64)
        else:
            within = (v >= lo) & (v <= hi)
        if not within.all():
            first = _shown(v[~within][0])
            if col in ("dp_rank", "stage"):
                size = "dp_size" if col == "dp_rank" else "pp_size"
                raise InputError(
                    f"{path}: {col} {first} is outside the job description's {size} {meta[size]}; "
                    f"fix {size} in {path.name.replace('trace-', 'meta-').replace('.parquet', '.yaml')} "
                    f"or the trace"
                )
            raise InputError(f"{path}: column {col} holds {first}, outside {lo} to {hi}; {_FIX}")
    start = df["start_ts"].to_numpy(np.float64)
    dur = df["duration"].to_numpy(np.float64)
    bad = ~(np.abs(start) <= MAX_SECONDS) | ~((dur >= 0) & (dur <= MAX_SECONDS))
    if bad.any():
        raise InputError(
            f"{path}: {int(bad.sum())} operation(s) with a missing, negative or impossible time "
            f"(start_ts/duration within {MAX_SECONDS:.0e} s); fix start_ts/duration (seconds) in the trace"
        )
    end = start + dur
    steps, code = np.unique(df["step"].to_numpy(), return_inverse=True)
    lo_t = np.full(len(steps), np.inf)
    hi_t = np.full(len(steps), -np.inf)
    np.minimum.at(lo_t, code, start)
    np.maximum.at(hi_t, code, end)
    if float(np.sum(hi_t - lo_t)) > MAX_JOB_SECONDS:
        raise InputError(
            f"{path}: the steps last more than {MAX_JOB_SECONDS:.0e} s end to end; fix start_ts/duration (seconds)"
        )
    for col in STRING_COLUMNS:
        cats = df[col].astype("category").cat.categories if df[col].dtype != "category" else df[col].cat.categories
        long = [c for c in cats if len(str(c)) > MAX_OPTYPE]
        if long:
            raise InputError(
                f"{path}: an {col} of {len(str(long[0])):,} characters (the artifact's are names like "
                f"forward-compute, at most {MAX_OPTYPE}); {_FIX}"
            )
    return df


def _shown(v: object) -> str:
    r = repr(v.item() if hasattr(v, "item") else v)
    return r if len(r) <= 40 else r[:40] + "…"
