"""Bounds and checks on what a source hands to the rest of nsyscomm, applied once at the boundary
so that no later stage meets a broken or hostile value: every reader's extract passes through
``checked``, every PyTorch profiler event through ``checked_events``.

* Names taken from a report (NVTX text, kernel names, callers, groups, host names) are cut at
  MAX_NAME characters with a visible marker and one warning, so that memory follows the number
  of calls, not the longest string a program wrote.
* Values the analyses compute with (message sizes, element counts, group sizes, timestamps) are
  checked for their type and range: a bad one is an InputError naming the file, the field and
  the fix (exit 2), never an internal error further down (a logarithm of a negative size).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from nsyscomm import settings
from nsyscomm.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MAX_NAME = 4096  # characters kept of a name; a templated C++ kernel name fits
CUT_MARK = "…[cut]"  # what replaces the rest
MAX_BYTES = 1 << 50  # 1 PiB: no single message of a training job comes near it
MAX_TIME_NS = 1 << 62  # ns from any clock's zero: 146 years
MAX_GROUP = 1 << 24  # ranks in a group (globalTid holds 24-bit pids; no job has more ranks)
# Kineto timestamps are µs since the epoch (about 1.8e15 today), or since process start: a
# value past 2**53 µs is no time (and its ns would not fit in 64 bits)
MAX_TS_US = float(1 << 53)
# The shortest OS-runtime call or NVTX range of the program's own kept for the late-arrival
# diagnosis: 100 us, below any delay it reports (nsyscomm.analyses.late's noise threshold is larger)
HOST_MIN_NS = 100_000

# What one reader may hold of one source: --memory-limit (NSYSCOMM_MEMORY_LIMIT, the
# memory per process DuckDB gets too), else DEFAULT_BUDGET. The readers of the formats that are
# parsed in Python (what-if Parquet traces, Kineto JSON) turn it into counts with their own cost
# per kept item, checked before the items are made; docs/limits.md states them.
DEFAULT_BUDGET = 1 << 30
MEMORY_LIMIT_ENV = "NSYSCOMM_MEMORY_LIMIT"  # nsyscomm.duck reads the same variable
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?i?B|bytes)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
_UNIT |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}

_NAME_COLUMNS = ("op", "api", "dtype", "group", "group_ranks", "caller", "source", "kernel", "algo", "proto")
_CHECKED_VALUES = (
    ("bytes", 0, MAX_BYTES, "message size (bytes=)"),
    ("numel", 0, 1 << 52, "element count (numel=)"),
    ("group_size", 1, MAX_GROUP, "group size (gsize=)"),
) + tuple(
    # a clock reading past 146 years either way is no clock's (2**63 - 1 is an unset end): no
    # difference of two such times overflows
    (col, -MAX_TIME_NS, MAX_TIME_NS, f"time ({col})")
    for col in (
        "cpu_start",
        "cpu_end",
        "gpu_start",
        "gpu_end",
        "exec_start",
        "exec_end",
        "wait_start",
        "wait_end",
        "duration_ns",
        "kernel_ns",
        "init_ns",
    )
)


def budget() -> int:
    """Bytes one reader may hold of one source: the memory limit set for this process (a size, or
    a share of RAM: "50%"), else DEFAULT_BUDGET. A limit that does not parse leaves the default
    (DuckDB's own check names the bad setting)."""
    text = settings.memory_limit()
    if text.endswith("%"):
        try:
            share = float(text[:-1]) / 100
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return DEFAULT_BUDGET
        return int(ram * share) if 0 < share <= 1 else DEFAULT_BUDGET
    m = _SIZE.match(text)
    if not m:
        return DEFAULT_BUDGET
    return max(1, int(float(m.group(1)) * _UNIT[(m.group(2) or "").lower()]))


def over_budget(path: Path, what: str, count: int, per_item: int) -> InputError | None:
    """An InputError when count items of per_item bytes each do not fit in the budget; None when
    they do."""
    most = budget() // per_item
    if count <= most:
        return None
    return InputError(
        f"{path}: {count:,} {what}, over the {most:,} this process may hold "
        f"(about {per_item * count / 2**30:.1f} GiB); if the file is real, give a larger "
        f"--memory-limit (NSYSCOMM_MEMORY_LIMIT; docs/limits.md)"
    )


def cut_name(name: str) -> str:
    """name, or its first MAX_NAME characters and CUT_MARK."""
    return name if len(name) <= MAX_NAME else name[:MAX_NAME] + CUT_MARK


def cut_sql(expr: str) -> str:
    """SQL (DuckDB or SQLite) for cut_name(expr): for readers that take names in SQL."""
    return f"CASE WHEN length({expr}) > {MAX_NAME} THEN substr({expr}, 1, {MAX_NAME}) || '{CUT_MARK}' ELSE {expr} END"


class _Source(Protocol):
    """What checked() reads and replaces of an extract (nsyscomm.ingest.extract_type.Extract, not
    imported: this module stays free of pandas and pyarrow until a check runs)."""

    report: str
    calls: pa.Table
    markers: pd.DataFrame
    warnings: list[str]


_S = TypeVar("_S", bound=_Source)


def checked(extract: _S, path: Path, fix: str | None = None) -> _S:
    """The extract of the source at path with its names bounded (one warning when some were cut)
    and its values checked; raises InputError on a value no real source holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    calls = extract.calls
    fix = fix or (
        "record the job again (nsyscomm run), or leave this file out; a report nsys wrote holds no such value"
    )
    for col, lo, hi, what in _CHECKED_VALUES:
        if col not in calls.column_names:
            continue
        c = calls.column(col)
        if c.null_count == len(c):
            continue
        if pa.types.is_floating(c.type):  # a source's column with gaps, as pandas types it: bounds as floats
            lo_v, hi_v = pa.scalar(float(lo)), pa.scalar(float(hi))
        else:
            lo_v, hi_v = lo, hi
        bad = pc.or_(pc.less(c, lo_v), pc.greater(c, hi_v))
        n = pc.sum(pc.cast(pc.fill_null(bad, False), pa.int64())).as_py() or 0
        if n:
            first = pc.filter(c, pc.fill_null(bad, False))[0].as_py()
            raise InputError(
                f"{path}: {n} call(s) with an impossible {what} (e.g. {first}; allowed {lo} to {hi}); {fix}"
            )
    cut = 0
    for col in _NAME_COLUMNS:
        if col not in calls.column_names:
            continue
        c = calls.column(col)
        if not pa.types.is_string(c.type) and not pa.types.is_large_string(c.type):
            continue
        long = pc.fill_null(pc.greater(pc.utf8_length(c), MAX_NAME), False)
        n = pc.sum(pc.cast(long, pa.int64())).as_py() or 0
        # names the reader cut already, in SQL (cut_sql), count for the warning too
        cut += pc.sum(pc.cast(pc.fill_null(pc.ends_with(c, CUT_MARK), False), pa.int64())).as_py() or 0
        if n:
            short = pc.binary_join_element_wise(pc.utf8_slice_codeunits(c, 0, MAX_NAME), CUT_MARK, "")
            calls = calls.set_column(calls.column_names.index(col), col, pc.if_else(long, short, c))
    markers = extract.markers
    if "host" in getattr(markers, "columns", ()):
        long = markers["host"].map(lambda h: isinstance(h, str) and len(h) > MAX_NAME)
        if long.any():
            cut += int(long.sum())
            markers = markers.copy()
            markers.loc[long, "host"] = markers.loc[long, "host"].map(cut_name)
    extract.calls, extract.markers = calls, markers
    if cut:
        extract.warnings.append(
            f"{extract.report}: {cut} name(s) longer than {MAX_NAME} characters were cut (marked {CUT_MARK})"
        )
    return extract


# --------------------------------------------------------------------------- PyTorch profiler events

_STR_FIELDS = ("name", "cat", "ph")
_ID_FIELDS = ("pid", "tid")
_TIME_FIELDS = ("ts", "dur")


def _is_int64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < 1 << 63


def _event_error(path: Path, i: int, field: str, value, want: str) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:40] + "…"
    return InputError(
        f"{path}: trace event {i} has {field} = {shown}, not {want}; pass the trace as the "
        f"PyTorch profiler wrote it (prof.export_chrome_trace) or leave this file out"
    )


def checked_events(items: Iterable[tuple[str, object]], path: Path) -> Iterator[tuple[str, object]]:
    """The ("event", dict) / ("meta", (key, value)) items of kineto.iter_trace with every event's
    fields of the right type: name, cat and ph strings, args an object, ts and dur finite numbers
    within MAX_TS_US. A parse the JSON decoder cannot finish (arrays nested past Python's
    recursion limit, an integer of thousands of digits) is an InputError too."""
    i = -1
    it = iter(items)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except RecursionError:
            raise InputError(
                f"{path}: JSON nested too deeply to read (event {i + 1}); pass the trace as the "
                f"PyTorch profiler wrote it (prof.export_chrome_trace)"
            ) from None
        except ValueError as e:  # int(): more digits than Python converts (4300)
            if isinstance(e, json.JSONDecodeError) or "digits" not in str(e):
                raise
            raise InputError(
                f"{path}: a number of thousands of digits (event {i + 1}); pass the trace as the "
                f"PyTorch profiler wrote it (prof.export_chrome_trace)"
            ) from None
        kind, event = item
        if kind == "event":
            i += 1
            if isinstance(event, dict):
                _check_event(event, i, path)
        yield item


def _check_event(e: dict, i: int, path: Path) -> None:
    for f in _STR_FIELDS:
        v = e.get(f)
        if v is not None and not isinstance(v, str):
            raise _event_error(path, i, f, v, "a string")
    args = e.get("args")
    if args is not None and not isinstance(args, dict):
        raise _event_error(path, i, "args", args, "an object")
    for f in _ID_FIELDS:  # keys of the reader's tables: hashable, and 64-bit where integers
        v = e.get(f)
        if v is not None and not isinstance(v, str) and not _is_int64(v):
            raise _event_error(path, i, f, v, "an integer or a string")
    if args and "correlation" in args and not _is_int64(args["correlation"]):
        raise _event_error(path, i, "args.correlation", args["correlation"], "an integer")
    for f in _TIME_FIELDS:
        v = e.get(f)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _event_error(path, i, f, v, "a number of µs")
        if not (math.isfinite(v) and abs(v) <= MAX_TS_US):
            raise _event_error(path, i, f, v, f"a finite number of µs below {MAX_TS_US:.0e}")
    name = e.get("name")
    if name is not None and len(name) > MAX_NAME:
        e["name"] = cut_name(name)
