"""The gate's vocabulary: what a change is reported against (Key) and the numbers compared
(METRICS), each read from a schema-3 JSON document (docs/architecture.md, "JSON contract")."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

SCHEMA_VERSION = 3
BASELINE_KIND = "baseline"
POLICIES = ("fail", "warn", "ignore")
LEVELS = ("auto", "op", "caller")
FIX_BASELINE = "regenerate it with: nsyscomm baseline --output BASELINE.json REPORT.sqlite"


class Key(NamedTuple):
    """A summary row's identity: what a change is reported against."""

    op: str
    bytes: int | None
    group_size: int | None
    caller: str | None = None

    def label(self) -> str:
        from nsyscomm.views.units import human_bytes

        s = f"{self.op} {human_bytes(self.bytes) if self.bytes is not None else 'size ?'}"
        if self.group_size is not None:
            s += f" n={self.group_size}"
        if self.caller:
            s += f" @ {self.caller}"
        return s

    def as_dict(self) -> dict:
        return {"op": self.op, "bytes": self.bytes, "group_size": self.group_size, "caller": self.caller}


def _key(row: dict, with_caller: bool) -> Key:
    return Key(
        row["op"], _int(row.get("bytes")), _int(row.get("group_size")), row.get("caller") if with_caller else None
    )


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)) and not (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return float(v)
    return None


def _int(v) -> int | None:
    x = _num(v)
    return None if x is None else int(x)


def _rows_of(section) -> list[dict]:
    """A per-rank section as rows: a list of rows, or a dict holding them under per_rank/ranks."""
    if isinstance(section, list):
        return [r for r in section if isinstance(r, dict)]
    if isinstance(section, dict):
        for k in ("per_rank", "ranks"):
            if isinstance(section.get(k), list):
                return [r for r in section[k] if isinstance(r, dict)]
    return []


# (section, field) of every per-rank extractor made: what nsyscomm.gate.validate checks at the edge
SECTION_FIELDS: set[tuple[str, str]] = set()


def per_rank(section: str, fld: str) -> Callable[[dict], dict | None]:
    """Extractor: {rank: value} of ``doc[section]``'s rows (None when the section is absent)."""
    SECTION_FIELDS.add((section, fld))

    def get(doc: dict) -> dict | None:
        if section not in doc:
            return None
        out = {}
        for r in _rows_of(doc[section]):
            rank, v = _int(r.get("rank")), _num(r.get(fld))
            if rank is not None and v is not None:
                out[rank] = v
        return out or None

    return get


def steady_or(section: str, fld: str, steady_fld: str | None = None) -> Callable[[dict], dict | None]:
    """Extractor: {rank: value} of the `steady` section (warm-up steps, setup calls and first
    meetings left out) when the document has it, else of ``doc[section]`` (documents written
    before it was added)."""
    steady, other = per_rank("steady", steady_fld or fld), per_rank(section, fld)

    def get(doc: dict) -> dict | None:
        return steady(doc) if "steady" in doc else other(doc)

    return get


def job_max(
    section: str, fld: str, ranks: Callable[[dict], dict | None] | None = None
) -> Callable[[dict], float | None]:
    """Extractor: the job's worst rank (or the section's own scalar ``fld`` when it has one);
    `ranks`: the per-rank extractor, when not the section's own."""
    ranks = ranks or per_rank(section, fld)

    def get(doc: dict) -> float | None:
        sec = doc.get(section)
        if isinstance(sec, dict) and _num(sec.get(fld)) is not None:
            return _num(sec.get(fld))
        vals = ranks(doc)
        return max(vals.values()) if vals else None

    return get


def summary_total(fld: str) -> Callable[[dict], float | None]:
    def get(doc: dict) -> float | None:
        rows = doc.get("summary") or []
        vals = [v for v in (_num(r.get(fld)) for r in rows) if v is not None]
        return sum(vals) if vals else None

    return get


@dataclass(frozen=True)
class Metric:
    """One comparable number. scope: key (a summary row's field), rank ({rank: value}) or job (one value)."""

    id: str  # "<scope>.<name>", the name used in options and TOML
    label: str
    unit: str
    better: str  # "higher" or "lower"
    rel: float  # default threshold, percent of the baseline value
    abs: float  # default absolute floor, in unit
    fail: bool = True  # False: reported, never fails the gate
    extract: Callable[[dict], Any] | None = None  # rank/job scope: doc -> {rank: v} / v

    @property
    def scope(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split(".", 1)[1]

    def of_ranks(self, doc: dict) -> dict[int, float] | None:
        """A rank metric's {rank: value} in doc (None when the document lacks its section)."""
        return self._read(doc)

    def of_job(self, doc: dict) -> float | None:
        """A job metric's value in doc (None when the document lacks it)."""
        return self._read(doc)

    def _read(self, doc: dict) -> Any:
        if self.extract is None:  # a key metric: read from the summary row of the same name
            raise TypeError(f"{self.id} is read from summary rows, not from the document")
        return self.extract(doc)


# The list to extend. Key metrics read the summary row's field of the same name; a field absent
# from either side (e.g. a future per-key exposed_ms or wait_ms) is simply not compared.
METRICS: tuple[Metric, ...] = (
    Metric("key.busbw_GBps", "bus bandwidth", "GB/s", "higher", 10.0, 1.0),
    Metric("key.avg_ms", "avg latency", "ms", "lower", 10.0, 0.01),
    Metric("key.p50_ms", "p50 latency", "ms", "lower", 10.0, 0.01),
    # the fastest call: a host's load only adds time, a slowdown inside every call moves it too
    Metric("key.min_ms", "min latency", "ms", "lower", 10.0, 0.01),
    Metric("key.calls", "calls", "", "lower", 10.0, 0.0),
    Metric("key.count", "logical count", "", "lower", 10.0, 0.0, fail=False),
    Metric("key.exposed_ms", "exposed comm", "ms", "lower", 10.0, 0.05),
    Metric("key.wait_ms", "wait", "ms", "lower", 20.0, 0.05),
    Metric("key.arrival_delay_ms", "arrival skew", "ms", "lower", 25.0, 0.05),
    # the rank and job times: the steady ones (docs/gate.md, "Start-up and warm-up stay out")
    Metric("rank.comm_ms", "comm time", "ms", "lower", 20.0, 0.1, extract=steady_or("ranks", "comm_ms")),
    Metric("rank.wait_ms", "wait time", "ms", "lower", 25.0, 0.1, extract=steady_or("skew", "wait_ms")),
    Metric(
        "rank.arrival_delay_ms",
        "arrival delay",
        "ms",
        "lower",
        25.0,
        0.05,
        extract=steady_or("skew", "avg_arrival_delay_ms"),
    ),
    Metric("rank.exposed_ms", "exposed comm", "ms", "lower", 20.0, 0.1, extract=steady_or("overlap", "exposed_ms")),
    Metric("job.total_ms", "collective latency", "ms", "lower", 10.0, 0.1, extract=summary_total("total_ms")),
    Metric("job.calls", "calls", "", "lower", 10.0, 0.0, extract=summary_total("calls")),
    Metric(
        "job.comm_ms",
        "comm time (max rank)",
        "ms",
        "lower",
        10.0,
        0.1,
        extract=job_max("ranks", "comm_ms", steady_or("ranks", "comm_ms")),
    ),
    Metric(
        "job.wait_ms",
        "wait time (max rank)",
        "ms",
        "lower",
        20.0,
        0.1,
        extract=job_max("skew", "wait_ms", steady_or("skew", "wait_ms")),
    ),
    Metric(
        "job.arrival_delay_ms",
        "arrival delay (max rank)",
        "ms",
        "lower",
        25.0,
        0.05,
        extract=job_max("skew", "avg_arrival_delay_ms", steady_or("skew", "avg_arrival_delay_ms")),
    ),
    Metric(
        "job.exposed_ms",
        "exposed comm (max rank)",
        "ms",
        "lower",
        10.0,
        0.1,
        extract=job_max("overlap", "exposed_ms", steady_or("overlap", "exposed_ms")),
    ),
)
METRIC_BY_ID = {m.id: m for m in METRICS}
