"""CI performance-regression gate: compare a run's communication against one or more baseline runs.

    from nsyscomm import gate
    baselines = gate.load_runs(["baseline.json"])            # one or several runs (noise band)
    current = gate.load_run(["new_run.sqlite"])              # reports, a folder, or a JSON summary
    verdict = gate.compare(baselines, current, gate.settings_from())
    verdict.exit_code                                        # 0 pass, 1 regression

Everything compared is a *metric*: an entry of ``METRICS`` that reads one number per item from a
schema-1 JSON document (docs/architecture.md, "JSON contract"). Items are summary keys (op, bytes, group size[, caller]),
ranks, or the whole job. A metric is compared only when both sides carry it, so a new section
of the JSON (e.g. ``overlap`` with ``exposed_ms`` per rank) is one ``METRICS`` entry away.

Unusable input (no such file, broken JSON, wrong schema, bad config) raises ``InputError``
(exit status 2); a regression is a verdict (exit status 1), never an exception.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import tomllib

from nsyscomm import __version__
from nsyscomm import busbw as ops
from nsyscomm.errors import InputError

SCHEMA_VERSION = 1
BASELINE_KIND = "baseline"
POLICIES = ("fail", "warn", "ignore")
LEVELS = ("auto", "op", "caller")
FIX_BASELINE = "regenerate it with: nsyscomm baseline --output BASELINE.json REPORT.sqlite"


# --------------------------------------------------------------------------------------- keys


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


# ------------------------------------------------------------------------------------ metrics


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


def per_rank(section: str, fld: str) -> Callable[[dict], dict | None]:
    """Extractor: {rank: value} of ``doc[section]``'s rows (None when the section is absent)."""

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


def job_max(section: str, fld: str) -> Callable[[dict], float | None]:
    """Extractor: the job's worst rank (or the section's own scalar ``fld`` when it has one)."""
    ranks = per_rank(section, fld)

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
        vals = [_num(r.get(fld)) for r in rows]
        vals = [v for v in vals if v is not None]
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


# The list to extend. Key metrics read the summary row's field of the same name; a field absent
# from either side (e.g. a future per-key exposed_ms or wait_ms) is simply not compared.
METRICS: tuple[Metric, ...] = (
    Metric("key.busbw_GBps", "bus bandwidth", "GB/s", "higher", 10.0, 1.0),
    Metric("key.avg_ms", "avg latency", "ms", "lower", 10.0, 0.01),
    Metric("key.p50_ms", "p50 latency", "ms", "lower", 10.0, 0.01),
    Metric("key.calls", "calls", "", "lower", 10.0, 0.0),
    Metric("key.count", "logical count", "", "lower", 10.0, 0.0, fail=False),
    Metric("key.exposed_ms", "exposed comm", "ms", "lower", 10.0, 0.05),
    Metric("key.wait_ms", "wait", "ms", "lower", 20.0, 0.05),
    Metric("key.arrival_delay_ms", "arrival skew", "ms", "lower", 25.0, 0.05),
    Metric("rank.comm_ms", "comm time", "ms", "lower", 20.0, 0.1, extract=per_rank("ranks", "comm_ms")),
    Metric("rank.wait_ms", "wait time", "ms", "lower", 25.0, 0.1, extract=per_rank("ranks", "wait_ms")),
    Metric(
        "rank.arrival_delay_ms",
        "arrival delay",
        "ms",
        "lower",
        25.0,
        0.05,
        extract=per_rank("skew", "avg_arrival_delay_ms"),
    ),
    Metric("rank.exposed_ms", "exposed comm", "ms", "lower", 20.0, 0.1, extract=per_rank("overlap", "exposed_ms")),
    Metric("job.total_ms", "collective latency", "ms", "lower", 10.0, 0.1, extract=summary_total("total_ms")),
    Metric("job.calls", "calls", "", "lower", 10.0, 0.0, extract=summary_total("calls")),
    Metric("job.comm_ms", "comm time (max rank)", "ms", "lower", 10.0, 0.1, extract=job_max("ranks", "comm_ms")),
    Metric("job.wait_ms", "wait time (max rank)", "ms", "lower", 20.0, 0.1, extract=job_max("ranks", "wait_ms")),
    Metric(
        "job.arrival_delay_ms",
        "arrival delay (max rank)",
        "ms",
        "lower",
        25.0,
        0.05,
        extract=job_max("skew", "avg_arrival_delay_ms"),
    ),
    Metric(
        "job.exposed_ms", "exposed comm (max rank)", "ms", "lower", 10.0, 0.1, extract=job_max("overlap", "exposed_ms")
    ),
)
METRIC_BY_ID = {m.id: m for m in METRICS}


# ----------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Threshold:
    rel: float  # percent
    abs: float
    fail: bool = True
    enabled: bool = True


@dataclass
class Settings:
    thresholds: dict[str, Threshold] = field(
        default_factory=lambda: {m.id: Threshold(m.rel, m.abs, m.fail) for m in METRICS}
    )
    min_calls: int = 10  # a key counts only when both sides have at least this many calls
    new_keys: str = "fail"  # a key absent from every baseline run: fail | warn | ignore
    missing_keys: str = "warn"  # a baseline key absent from the current run
    noise_sigma: float = 0.0  # widen the baseline runs' [min, max] band by this many standard deviations
    level: str = "auto"  # compare per op (op, bytes, n) or per caller too; auto: caller when both sides have it
    source: list[str] = field(default_factory=list)  # where the settings came from

    def to_dict(self) -> dict:
        return {
            "min_calls": self.min_calls,
            "new_keys": self.new_keys,
            "missing_keys": self.missing_keys,
            "noise_sigma": self.noise_sigma,
            "level": self.level,
            "source": self.source,
            "thresholds": {
                k: {"rel_pct": t.rel, "abs": t.abs, "fail": t.fail, "enabled": t.enabled}
                for k, t in self.thresholds.items()
            },
        }


_TOP_KEYS = {"min_calls", "new_keys", "missing_keys", "noise_sigma", "by", "rel", "abs", "ignore"}


def _metric_ids(name: str, where: str) -> list[str]:
    """'key.avg_ms' -> itself; 'avg_ms' -> every scope's avg_ms; 'key' -> every key metric."""
    if name in METRIC_BY_ID:
        return [name]
    hits = [m.id for m in METRICS if m.name == name or m.scope == name]
    if not hits:
        raise InputError(f"{where}: unknown metric {name!r}; known: {', '.join(METRIC_BY_ID)}")
    return hits


def _as_float(v, what: str, where: str) -> float:
    if isinstance(v, str):
        v = v.strip().rstrip("%")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {what} must be a number, got {v!r}") from None
    if math.isnan(x) or x < 0:
        raise InputError(f"{where}: {what} must be a number >= 0, got {v!r}")
    return x


def _policy(v, what: str, where: str) -> str:
    if v not in POLICIES:
        raise InputError(f"{where}: {what} must be one of {', '.join(POLICIES)}, got {v!r}")
    return v


def apply_config(settings: Settings, cfg: dict, where: str) -> Settings:
    """Apply a ``[tool.nsyscomm.gate]`` table (already parsed) on top of settings."""
    s = replace(settings, thresholds=dict(settings.thresholds), source=[*settings.source, where])
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: the gate settings must be a table")
    for k, v in cfg.items():
        if k in ("key", "rank", "job"):
            if not isinstance(v, dict):
                raise InputError(f"{where}: {k} must be a table of metrics, e.g. [{k}.avg_ms] rel = 10")
            for name, spec in v.items():
                mid = f"{k}.{name}"
                if mid not in METRIC_BY_ID:
                    raise InputError(f"{where}: unknown metric {mid!r}; known: {', '.join(METRIC_BY_ID)}")
                s.thresholds[mid] = _threshold(s.thresholds[mid], spec, f"{where}: {mid}")
        elif k == "min_calls":
            s.min_calls = int(_as_float(v, "min_calls", where))
        elif k == "new_keys":
            s.new_keys = _policy(v, k, where)
        elif k == "missing_keys":
            s.missing_keys = _policy(v, k, where)
        elif k == "noise_sigma":
            s.noise_sigma = _as_float(v, k, where)
        elif k == "by":
            if v not in LEVELS:
                raise InputError(f"{where}: by must be one of {', '.join(LEVELS)}, got {v!r}")
            s.level = v
        elif k == "rel":  # a default for every metric
            x = _as_float(v, "rel", where)
            s.thresholds = {m: replace(t, rel=x) for m, t in s.thresholds.items()}
        elif k == "ignore":
            names = [v] if isinstance(v, str) else v
            if not isinstance(names, list):
                raise InputError(f"{where}: ignore must be a list of metric names")
            for name in names:
                for mid in _metric_ids(str(name), where):
                    s.thresholds[mid] = replace(s.thresholds[mid], enabled=False)
        else:
            raise InputError(
                f"{where}: unknown gate setting {k!r}; known: {', '.join(sorted(_TOP_KEYS | {'key', 'rank', 'job'}))}"
            )
    return s


def _threshold(t: Threshold, spec, where: str) -> Threshold:
    if isinstance(spec, (int, float, str)) and not isinstance(spec, bool):
        return replace(t, rel=_as_float(spec, "rel", where))
    if not isinstance(spec, dict):
        raise InputError(f"{where}: expected a number (relative %) or a table with rel/abs/fail/enabled")
    for k, v in spec.items():
        if k == "rel":
            t = replace(t, rel=_as_float(v, "rel", where))
        elif k == "abs":
            t = replace(t, abs=_as_float(v, "abs", where))
        elif k in ("fail", "enabled"):
            if not isinstance(v, bool):
                raise InputError(f"{where}: {k} must be true or false")
            t = replace(t, **{k: v})
        else:
            raise InputError(f"{where}: unknown threshold field {k!r} (rel, abs, fail, enabled)")
    return t


def read_toml(path: str | os.PathLike) -> dict:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{p}: no such config file; check the path") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{p}: not valid TOML ({e}); fix the syntax") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read ({e.strerror})") from None
    return data


def find_pyproject(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest pyproject.toml at or above start (the working directory)."""
    d = Path(start or os.getcwd()).resolve()
    for p in (d, *d.parents):
        if (p / "pyproject.toml").is_file():
            return p / "pyproject.toml"
        if (p / ".git").exists():
            return None
    return None


def config_table(data: dict) -> dict | None:
    """[tool.nsyscomm.gate], else [gate], else None."""
    tool = data.get("tool", {})
    if isinstance(tool, dict) and isinstance(tool.get("nsyscomm"), dict) and "gate" in tool["nsyscomm"]:
        return tool["nsyscomm"]["gate"]
    if "gate" in data:
        return data["gate"]
    return None


def settings_from(
    config: str | os.PathLike | None = None, *, pyproject: bool = True, search_from: str | os.PathLike | None = None
) -> Settings:
    """Defaults, then [tool.nsyscomm.gate] of the nearest pyproject.toml, then the config file.

    A config file may hold [tool.nsyscomm.gate], [gate], or the settings at its top level."""
    s = Settings()
    if pyproject:
        pp = find_pyproject(search_from)
        if pp is not None:
            table = config_table(read_toml(pp))
            if table is not None:
                s = apply_config(s, table, str(pp))
    if config is not None:
        data = read_toml(config)
        table = config_table(data)
        s = apply_config(s, data if table is None else table, str(config))
    return s


def parse_metric_value(spec: str, what: str) -> tuple[list[str] | None, float]:
    """'10' or '10%' -> (None, 10.0) (every metric); 'key.avg_ms=5' -> (['key.avg_ms'], 5.0)."""
    where = f"--{what} {spec}"
    if "=" in spec:
        name, val = spec.split("=", 1)
        return _metric_ids(name.strip(), where), _as_float(val, what, where)
    return None, _as_float(spec, what, where)


def override(
    settings: Settings,
    *,
    rel: Iterable[str] = (),
    abs_: Iterable[str] = (),
    ignore: Iterable[str] = (),
    min_calls: int | None = None,
    new_keys: str | None = None,
    missing_keys: str | None = None,
    noise_sigma: float | None = None,
    level: str | None = None,
) -> Settings:
    """Command-line options on top of settings."""
    s = replace(settings, thresholds=dict(settings.thresholds))
    for spec in rel:
        ids, x = parse_metric_value(spec, "rel")
        for mid in ids or list(s.thresholds):
            s.thresholds[mid] = replace(s.thresholds[mid], rel=x)
    for spec in abs_:
        if "=" not in spec:
            raise InputError(f"--abs {spec}: name the metric (units differ), e.g. --abs key.avg_ms=0.02")
        ids, x = parse_metric_value(spec, "abs")
        for mid in ids:
            s.thresholds[mid] = replace(s.thresholds[mid], abs=x)
    for name in ignore:
        for mid in _metric_ids(name, f"--ignore {name}"):
            s.thresholds[mid] = replace(s.thresholds[mid], enabled=False)
    if min_calls is not None:
        s.min_calls = min_calls
    if new_keys is not None:
        s.new_keys = new_keys
    if missing_keys is not None:
        s.missing_keys = missing_keys
    if noise_sigma is not None:
        s.noise_sigma = noise_sigma
    if level is not None:
        s.level = level
    return s


# --------------------------------------------------------------------------------------- runs


@dataclass
class Run:
    """One profiled run of the job, as comparable rows: a schema-1 document plus its keyed summary."""

    source: str
    doc: dict
    op_rows: dict[Key, dict]
    caller_rows: dict[Key, dict] | None  # None when the run carries no caller information

    @property
    def empty(self) -> bool:
        return not self.op_rows

    def rows(self, level: str) -> dict[Key, dict]:
        return self.caller_rows if level == "caller" and self.caller_rows is not None else self.op_rows


def _aggregate(rows: list[dict]) -> dict:
    """Caller rows of one (op, bytes, n) -> the op-level row (p50 is kept only when exact)."""
    if len(rows) == 1:
        return {**rows[0], "caller": None}
    first = rows[0]
    count = sum(_num(r.get("count")) or 0 for r in rows)
    calls = sum(_num(r.get("calls")) or 0 for r in rows)
    totals = [_num(r.get("total_ms")) for r in rows]
    total = sum(t for t in totals if t is not None) if all(t is not None for t in totals) else None
    avg = total / count if total is not None and count else None
    nbytes, n = _num(first.get("bytes")), _int(first.get("group_size"))
    algbw = nbytes / (avg * 1e6) if nbytes is not None and avg else None
    factor = ops.busbw_factor(first["op"], n)
    maxes = [_num(r.get("max_ms")) for r in rows if _num(r.get("max_ms")) is not None]
    out = {
        **first,
        "caller": None,
        "count": int(count),
        "calls": int(calls),
        "total_ms": total,
        "avg_ms": avg,
        "p50_ms": None,
        "max_ms": max(maxes) if maxes else None,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor if algbw is not None and factor is not None else None,
    }
    # any other numeric field (a future per-key metric): summed when additive is unknown -> dropped
    for k in set().union(*rows) - set(out):
        out[k] = None
    return out


def _validate_rows(rows, where: str, what: str) -> list[dict]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("op"), str) for r in rows):
        raise InputError(f"{where}: '{what}' must be a list of rows with an 'op' each; {FIX_BASELINE}")
    return rows


def run_from_doc(doc: dict, where: str) -> Run:
    """A schema-1 summary document (summarize --format json, or a baseline's run) -> Run."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: a run must be a JSON object; {FIX_BASELINE}")
    if "summary" not in doc:
        raise InputError(
            f"{where}: no 'summary' list; make it with nsyscomm summarize --format json, or {FIX_BASELINE}"
        )
    summary = _validate_rows(doc["summary"], where, "summary")
    by_caller = [r for r in summary if r.get("caller") is not None]
    extra = (
        _validate_rows(doc.get("summary_by_caller"), where, "summary_by_caller")
        if doc.get("summary_by_caller") is not None
        else None
    )
    for k in ("ranks",):
        if k in doc and not isinstance(doc[k], list):
            raise InputError(f"{where}: '{k}' must be a list; {FIX_BASELINE}")
    if "skew" in doc and doc["skew"] is not None and not isinstance(doc["skew"], dict):
        raise InputError(f"{where}: 'skew' must be an object; {FIX_BASELINE}")
    if by_caller:  # made with --by caller: aggregate to op level
        caller_rows = _merge_rows(summary, True)
        groups: dict[Key, list[dict]] = {}
        for r in summary:
            groups.setdefault(_key(r, False), []).append(r)
        op_rows = {k: _aggregate(v) for k, v in groups.items()}
        doc = {**doc, "summary": list(op_rows.values()), "summary_by_caller": summary}
    else:
        op_rows = _merge_rows(summary, False)
        caller_rows = _merge_rows(extra, True) if extra and any(r.get("caller") for r in extra) else None
    name = where
    if isinstance(doc.get("label"), str) and doc["label"]:
        name = f"{where} [{doc['label']}]"
    return Run(name, doc, op_rows, caller_rows)


def _merge_rows(rows: list[dict], with_caller: bool) -> dict[Key, dict]:
    groups: dict[Key, list[dict]] = {}
    for r in rows:
        groups.setdefault(_key(r, with_caller), []).append(r)
    return {k: (v[0] if len(v) == 1 else _aggregate(v) | {"caller": k.caller}) for k, v in groups.items()}


def run_from_result(result, label: str | None = None) -> Run:
    """An api.Result -> Run, keeping both the per-op and the per-caller summary."""
    from nsyscomm.views.json_out import SUMMARY_KEYS, document, records

    doc = document(result, by_caller=False)
    by_caller = records(result.summarize(by_caller=True), SUMMARY_KEYS)
    if any(r.get("caller") for r in by_caller):
        doc["summary_by_caller"] = by_caller
    if label:
        doc["label"] = label
    src = ", ".join(result.reports) if len(result.reports) <= 3 else f"{len(result.reports)} reports"
    return run_from_doc(doc, src or "(no reports)")


def _looks_json(p: Path) -> bool:
    if p.suffix.lower() == ".json":
        return True
    if p.is_file():
        try:
            with open(p, "rb") as f:
                return f.read(64).lstrip()[:1] in (b"{", b"[")
        except OSError:
            return False
    return False


def read_json(path: str | os.PathLike) -> Any:
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a folder, not a JSON file; check the path")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{p}: no such file; check the path, or create it with: nsyscomm baseline --output {p} REPORT.sqlite"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read ({getattr(e, 'strerror', None) or e}); {FIX_BASELINE}") from None
    if not text.strip():
        raise InputError(f"{p}: the file is empty; {FIX_BASELINE}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not valid JSON (line {e.lineno}: {e.msg}); {FIX_BASELINE}") from None
    except (ValueError, RecursionError) as e:
        # what the decoder refuses besides syntax: an integer of thousands of digits, arrays nested
        # past the recursion limit (issue 26's hostile corpus)
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
        raise InputError(f"{p}: not a JSON document nsyscomm wrote ({what}); {FIX_BASELINE}") from None


def runs_from_json(data: Any, where: str) -> list[Run]:
    """A summary document (one run) or a baseline document ({"runs": [...]}: several) -> runs."""
    if not isinstance(data, dict):
        raise InputError(f'{where}: expected a JSON object with "schema": 1; {FIX_BASELINE}')
    schema = data.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        got = 'no "schema"' if "schema" not in data else f'"schema": {json.dumps(schema)}'
        raise InputError(f'{where}: {got}, this nsyscomm reads "schema": {SCHEMA_VERSION}; {FIX_BASELINE}')
    if "runs" in data:
        runs = data["runs"]
        if not isinstance(runs, list) or not runs:
            raise InputError(f"{where}: 'runs' must be a non-empty list of summaries; {FIX_BASELINE}")
        out = []
        for i, r in enumerate(runs):
            if (
                isinstance(r, dict)
                and "schema" in r
                and (type(r["schema"]) is not int or r["schema"] != SCHEMA_VERSION)
            ):
                raise InputError(
                    f'{where}: run {i} has "schema": {json.dumps(r["schema"])}, expected {SCHEMA_VERSION}; {FIX_BASELINE}'
                )
            out.append(run_from_doc(r, f"{where}#run{i}" if len(runs) > 1 else where))
        return out
    return [run_from_doc(data, where)]


def load_runs(sources: Iterable) -> list[Run]:
    """Each source -> its runs: a JSON summary (1 run), a baseline JSON (its runs), a Run, an
    api.Result, a dict, or report paths (a file, folder or glob: one run)."""
    out: list[Run] = []
    for src in sources:
        if isinstance(src, Run):
            out.append(src)
        elif isinstance(src, dict):
            out.extend(runs_from_json(src, "(document)"))
        elif hasattr(src, "summarize") and hasattr(src, "reports"):
            out.append(run_from_result(src))
        else:
            p = Path(src)
            if _looks_json(p):
                out.extend(runs_from_json(read_json(p), str(p)))
            else:
                from nsyscomm.api import load

                out.append(run_from_result(load([p])))
    return out


def load_run(sources: Iterable) -> Run:
    """The current run: JSON summaries are taken one each; report paths together form one job."""
    sources = list(sources)
    if not sources:
        raise InputError("no current run given: pass report files, a folder of reports, or a JSON summary")
    reports = [s for s in sources if isinstance(s, (str, os.PathLike)) and not _looks_json(Path(s))]
    others = [s for s in sources if s not in reports]
    runs: list[Run] = []
    if reports:
        from nsyscomm.api import load

        runs.append(run_from_result(load([Path(s) for s in reports])))
    runs.extend(load_runs(others))
    if len(runs) != 1:
        names = ", ".join(r.source for r in runs)
        raise InputError(
            f"the current side must be one run, got {len(runs)} ({names}); "
            f"pass one JSON summary or the reports of one job"
        )
    return runs[0]


def baseline_document(runs: list[Run], keep: int | None = None) -> dict:
    """Runs -> a baseline JSON document (schema 1, several runs; the newest last)."""
    docs = [r.doc for r in runs]
    if keep:
        docs = docs[-keep:]
    return {
        "schema": SCHEMA_VERSION,
        "tool": "nsyscomm",
        "version": __version__,
        "kind": BASELINE_KIND,
        "runs": [{"schema": SCHEMA_VERSION, **{k: v for k, v in d.items() if k != "schema"}} for d in docs],
    }


# --------------------------------------------------------------------------------- comparison

REGRESSION, IMPROVEMENT, OK, NOISE, WARN, SKIPPED = "regression", "improvement", "ok", "noise", "warn", "skipped"
NEW, MISSING, FEW_CALLS = "new", "missing", "few_calls"


@dataclass
class Comparison:
    metric: str
    label: str
    unit: str
    better: str
    baseline: float | None  # the reference: median over the baseline runs
    band: tuple[float, float] | None
    runs: int  # baseline runs that carry the value
    current: float | None
    delta: float | None
    rel_pct: float | None
    threshold: Threshold
    status: str
    reason: str = ""

    @property
    def fails(self) -> bool:
        return self.status == REGRESSION

    def to_dict(self) -> dict:
        return {
            "metric": self.metric,
            "label": self.label,
            "unit": self.unit,
            "better": self.better,
            "baseline": self.baseline,
            "band": list(self.band) if self.band else None,
            "runs": self.runs,
            "current": self.current,
            "delta": self.delta,
            "change_pct": self.rel_pct,
            "threshold": {"rel_pct": self.threshold.rel, "abs": self.threshold.abs},
            "status": self.status,
            "reason": self.reason,
        }


@dataclass
class Item:
    """One gated thing: a summary key, a rank, or the job; fails when a comparison does, or by policy."""

    scope: str  # key | rank | job
    name: str  # human label: "all_reduce 25.0 MB n=4", "rank 3", "job"
    key: Key | None = None
    rank: int | None = None
    status: str = OK  # regression | improvement | ok | new | missing | few_calls | noise
    fails: bool = False
    baseline_calls: float | None = None
    current_calls: float | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.status != OK or any(c.status not in (OK, SKIPPED) for c in self.comparisons)

    def to_dict(self) -> dict:
        return {
            "scope": self.scope,
            "name": self.name,
            "key": self.key.as_dict() if self.key else None,
            "rank": self.rank,
            "status": self.status,
            "fails": self.fails,
            "baseline_calls": self.baseline_calls,
            "current_calls": self.current_calls,
            "note": self.note,
            "comparisons": [c.to_dict() for c in self.comparisons],
        }


@dataclass
class Verdict:
    items: list[Item]
    level: str
    baselines: list[str]
    current: str
    settings: Settings
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(i.fails for i in self.items)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    @property
    def failing(self) -> list[Item]:
        return [i for i in self.items if i.fails]

    def headline(self) -> str:
        f = self.failing
        if not f:
            n = sum(1 for i in self.items if i.scope == "key")
            return (
                f"PASS: no communication regression ({n} key(s) compared per {self._level_name()}, "
                f"{len(self.baselines)} baseline run(s))"
            )
        parts = []
        for i in f[:3]:
            if i.status in (NEW, MISSING):
                parts.append(f"{i.name} ({i.status})")
            else:
                worst = [c for c in i.comparisons if c.fails]
                parts.append(f"{i.name} (" + ", ".join(f"{c.label} {_pct(c.rel_pct)}" for c in worst) + ")")
        more = f" and {len(f) - 3} more" if len(f) > 3 else ""
        n_keys = sum(1 for i in f if i.scope == "key")
        n_ranks = sum(1 for i in f if i.scope == "rank")
        what = ", ".join(
            x
            for x in (
                f"{n_keys} key(s)" if n_keys else "",
                f"{n_ranks} rank(s)" if n_ranks else "",
                "job totals" if any(i.scope == "job" for i in f) else "",
            )
            if x
        )
        return f"FAIL: regression in {what}: " + "; ".join(parts) + more

    def _level_name(self) -> str:
        return "op, size, group size, caller" if self.level == "caller" else "op, size, group size"

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "tool": "nsyscomm",
            "version": __version__,
            "kind": "gate",
            "status": "fail" if self.failed else "pass",
            "exit_code": self.exit_code,
            "headline": self.headline(),
            "level": self.level,
            "baselines": self.baselines,
            "current": self.current,
            "notes": self.notes,
            "settings": self.settings.to_dict(),
            "items": [i.to_dict() for i in self.items],
        }


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "+inf%" if x > 0 else "-inf%"
    return f"{x:+.1f}%"


def compare_values(
    metric: Metric, thr: Threshold, base: list[float], cur: float | None, noise_sigma: float = 0.0
) -> Comparison:
    """One metric of one item: baseline values (one per run that has it) against the current value."""

    def comp(status, reason="", **kw):
        return Comparison(
            metric.id,
            metric.label,
            metric.unit,
            metric.better,
            kw.get("ref"),
            kw.get("band"),
            len(base),
            cur,
            kw.get("delta"),
            kw.get("rel"),
            thr,
            status,
            reason,
        )

    if not base or cur is None:
        return comp(
            SKIPPED,
            "not in the current run" if base else "not in the baseline",
            ref=statistics.median(base) if base else None,
        )
    ref = statistics.median(base)
    spread = statistics.stdev(base) if len(base) > 1 else 0.0
    lo, hi = min(base) - noise_sigma * spread, max(base) + noise_sigma * spread
    delta = cur - ref
    rel = (delta / abs(ref) * 100.0) if ref else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    kw = {"ref": ref, "band": (lo, hi) if len(base) > 1 else None, "delta": delta, "rel": rel}
    if not thr.enabled:
        return comp(SKIPPED, "metric disabled", **kw)
    exceeds = abs(delta) > thr.abs and abs(rel) > thr.rel
    if not exceeds:
        return comp(OK, **kw)
    worse = delta < 0 if metric.better == "higher" else delta > 0
    if not worse:
        return comp(IMPROVEMENT, **kw)
    outside = cur < lo if metric.better == "higher" else cur > hi
    if not outside:
        return comp(NOISE, f"inside the baseline runs' band [{lo:.4g}, {hi:.4g}]", **kw)
    if not thr.fail:
        return comp(WARN, "reported only (fail = false)", **kw)
    return comp(REGRESSION, f"beyond {thr.rel:g}% and {thr.abs:g} {metric.unit}".rstrip(), **kw)


def _level(baselines: list[Run], current: Run, want: str) -> tuple[str, list[str]]:
    have = all(r.caller_rows is not None for r in [*baselines, current])
    if want == "caller" and not have:
        lacking = [r.source for r in [*baselines, current] if r.caller_rows is None]
        return "op", [f"compared per op, not per caller: no caller information in {', '.join(lacking[:3])}"]
    if want == "op":
        return "op", []
    return ("caller" if have else "op"), []


def _policy_status(item: Item, policy: str, status: str, gated: bool) -> None:
    item.status = status
    item.fails = policy == "fail" and gated
    if not gated:
        item.note = f"fewer calls than min_calls; {status} key not gated"
    elif policy != "fail":
        item.note = f"{status} key ({policy}: reported only)"


def compare(baselines: list[Run], current: Run, settings: Settings | None = None) -> Verdict:
    """Compare the current run against the baseline runs: one Item per key, rank and the job."""
    s = settings or Settings()
    if not baselines:
        raise InputError("no baseline run given: pass --baseline BASELINE.json (make it with nsyscomm baseline)")
    notes: list[str] = []
    if current.empty and any(not b.empty for b in baselines):
        raise InputError(
            f"{current.source}: no collective calls found, while the baseline has some; "
            f"the capture likely failed (profile with nsys --trace=cuda,nvtx and nsyscomm.annotate())"
        )
    level, level_notes = _level(baselines, current, s.level)
    notes += level_notes
    items: list[Item] = []

    # --- keys
    base_rows = [b.rows(level) for b in baselines]
    cur_rows = current.rows(level)
    keys = list(dict.fromkeys([k for rows in base_rows for k in rows] + list(cur_rows)))
    keys.sort(key=lambda k: (k.op, k.bytes is None, k.bytes or 0, k.group_size or 0, k.caller or ""))
    key_metrics = [m for m in METRICS if m.scope == "key"]
    for k in keys:
        in_base = [rows[k] for rows in base_rows if k in rows]
        cur = cur_rows.get(k)
        bcalls = [c for c in (_num(r.get("calls")) for r in in_base) if c is not None]
        bcall = statistics.median(bcalls) if bcalls else None
        ccall = _num(cur.get("calls")) if cur else None
        item = Item("key", k.label(), key=k, baseline_calls=bcall, current_calls=ccall)
        items.append(item)
        if not in_base:
            if s.new_keys != "ignore":
                _policy_status(item, s.new_keys, NEW, (ccall or 0) >= s.min_calls)
            else:
                items.pop()
            continue
        if cur is None:
            if s.missing_keys != "ignore":
                _policy_status(item, s.missing_keys, MISSING, (bcall or 0) >= s.min_calls)
            else:
                items.pop()
            continue
        gated = min(bcall or 0, ccall or 0) >= s.min_calls
        for m in key_metrics:
            base_vals = [v for v in (_num(r.get(m.name)) for r in in_base) if v is not None]
            cv = _num(cur.get(m.name))
            if not base_vals and cv is None:
                continue  # neither side has this metric (e.g. busbw without bytes)
            c = compare_values(m, s.thresholds[m.id], base_vals, cv, s.noise_sigma)
            if c.status == REGRESSION and not gated:
                c.status, c.reason = WARN, f"fewer than {s.min_calls} calls: not gated"
            item.comparisons.append(c)
        _settle(item, gated)

    # --- ranks and job
    rank_metrics = [m for m in METRICS if m.scope == "rank"]
    rank_items: dict[int, Item] = {}
    for m in rank_metrics:
        base_maps = [m.extract(b.doc) for b in baselines]
        cur_map = m.extract(current.doc)
        if cur_map is None or all(bm is None for bm in base_maps):
            continue  # the section is not on both sides: nothing to compare
        for rank in sorted(set(cur_map) & set().union(*(bm or {} for bm in base_maps))):
            vals = [bm[rank] for bm in base_maps if bm and rank in bm]
            it = rank_items.setdefault(rank, Item("rank", f"rank {rank}", rank=rank))
            it.comparisons.append(compare_values(m, s.thresholds[m.id], vals, cur_map[rank], s.noise_sigma))
    for rank in sorted(rank_items):
        _settle(rank_items[rank], True)
        items.append(rank_items[rank])
    base_ranks = set().union(*(set(per_rank("ranks", "calls")(b.doc) or {}) for b in baselines))
    cur_ranks = set(per_rank("ranks", "calls")(current.doc) or {})
    if base_ranks and cur_ranks and base_ranks != cur_ranks:
        notes.append(f"ranks differ: baseline {_ranges(base_ranks)}, current {_ranges(cur_ranks)}")
    bs = {(b.doc.get("skew") or {}).get("straggler_rank") for b in baselines} - {None}
    cs = (current.doc.get("skew") or {}).get("straggler_rank")
    if cs is not None and bs and cs not in bs:
        notes.append(f"straggler changed: rank {cs} now arrives last most often (baseline: rank(s) {_ranges(bs)})")

    job = Item("job", "job totals")
    for m in (m for m in METRICS if m.scope == "job"):
        base_vals = [v for v in (m.extract(b.doc) for b in baselines) if v is not None]
        cv = m.extract(current.doc)
        if base_vals and cv is not None:
            job.comparisons.append(compare_values(m, s.thresholds[m.id], base_vals, cv, s.noise_sigma))
    if job.comparisons:
        _settle(job, True)
        items.append(job)
    if current.empty and all(b.empty for b in baselines):
        notes.append("no collective calls on either side: nothing to compare")
    return Verdict(items, level, [b.source for b in baselines], current.source, s, notes)


def _settle(item: Item, gated: bool) -> None:
    sts = {c.status for c in item.comparisons}
    item.fails = REGRESSION in sts
    if item.fails:
        item.status = REGRESSION
    elif not gated:
        item.status = FEW_CALLS
        item.note = "fewer calls than min_calls: reported, not gated"
    elif IMPROVEMENT in sts and not (sts & {WARN, NOISE}):
        item.status = IMPROVEMENT
    elif WARN in sts:
        item.status = WARN
    elif NOISE in sts:
        item.status = NOISE
    elif IMPROVEMENT in sts:
        item.status = IMPROVEMENT
    else:
        item.status = OK


def _ranges(xs) -> str:
    xs = sorted(xs)
    return f"{xs[0]}-{xs[-1]}" if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)) else ",".join(map(str, xs))


def run_gate(baseline_sources: Iterable, current_sources: Iterable, settings: Settings | None = None) -> Verdict:
    """Load both sides and compare: the library call behind ``nsyscomm gate``."""
    baselines = load_runs(baseline_sources)
    current = load_run(current_sources)
    return compare(baselines, current, settings)
