"""Runs to compare: schema-3 JSON documents, baselines (several runs: a noise band), or reports
loaded into a Result, each made comparable rows keyed by Key."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsyscomm import __version__
from nsyscomm import busbw as ops
from nsyscomm.errors import InputError
from nsyscomm.gate import validate

if TYPE_CHECKING:
    from nsyscomm.analyses.result import Result
from nsyscomm.gate.metrics import BASELINE_KIND, FIX_BASELINE, SCHEMA_VERSION, Key, _int, _key, _num


@dataclass
class Run:
    """One profiled run of the job, as comparable rows: a schema-3 document plus its keyed summary."""

    source: str
    doc: dict
    op_rows: dict[Key, dict]
    caller_rows: dict[Key, dict] | None  # None when the run carries no caller information

    @property
    def empty(self) -> bool:
        return not self.op_rows

    def rows(self, level: str, caller_line: bool = True) -> dict[Key, dict]:
        """The rows keyed per op, or per caller ("file:line function"; "file function" without
        caller_line: the call sites of one function are one key, which edits elsewhere do not move)."""
        if level != "caller" or self.caller_rows is None:
            return self.op_rows
        if caller_line:
            return self.caller_rows
        return _merge_rows([{**r, "caller": without_line(r.get("caller"))} for r in self.caller_rows.values()], True)


def without_line(caller: str | None) -> str | None:
    """ "train.py:120 step" -> "train.py step": a caller as a key that survives edits to other lines."""
    if not caller:
        return caller
    where, sep, function = caller.partition(" ")
    file, colon, line = where.rpartition(":")
    return f"{file} {function}".rstrip() if colon and line.isdigit() else caller


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
    maxes = [m for m in (_num(r.get("max_ms")) for r in rows) if m is not None]
    mins = [m for m in (_num(r.get("min_ms")) for r in rows) if m is not None]
    out = {
        **first,
        "caller": None,
        "count": int(count),
        "calls": int(calls),
        "total_ms": total,
        "avg_ms": avg,
        "p50_ms": None,
        "max_ms": max(maxes) if maxes else None,
        "min_ms": min(mins) if len(mins) == len(rows) else None,  # exact only when every row has it
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
    """A schema-3 summary document (summarize --format json, or a baseline's run) -> Run."""
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
    # every number the comparison reads checked here, once: nothing it cannot compare gets past
    validate.summary_rows(summary, where, "summary")
    if extra is not None:
        validate.summary_rows(extra, where, "summary_by_caller")
    validate.sections(doc, where)
    caller_rows: dict[Key, dict] | None
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


def run_from_result(result: Result, label: str | None = None) -> Run:
    """An api.Result -> Run, keeping both the per-op and the per-caller summary."""
    from nsyscomm.analyses.contract import SUMMARY_KEYS, document, records

    doc = document(result, by_caller=False)
    by_caller = records(result.summarize(by_caller=True), SUMMARY_KEYS)
    if any(r.get("caller") for r in by_caller):
        doc["summary_by_caller"] = by_caller
    if label:
        doc["label"] = label
    src = ", ".join(result.reports) if len(result.reports) <= 3 else f"{len(result.reports)} reports"
    return run_from_doc(doc, src or "(no reports)")


def looks_json(p: Path) -> bool:
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
        # past the recursion limit (tests/support/hostile_corpus.py builds both)
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e).split(";")[0]
        raise InputError(f"{p}: not a JSON document nsyscomm wrote ({what}); {FIX_BASELINE}") from None


def runs_from_json(data: Any, where: str) -> list[Run]:
    """A summary document (one run) or a baseline document ({"runs": [...]}: several) -> runs."""
    if not isinstance(data, dict):
        raise InputError(f'{where}: expected a JSON object with "schema": {SCHEMA_VERSION}; {FIX_BASELINE}')
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


# the gate reads Results, never reports: nsyscomm.api loads them (api.run_gate, api.gate_sources)
_REPORT_PATH = (
    "{}: not a JSON summary or baseline; load reports with nsyscomm.api.load and pass the Result, "
    "or compare through nsyscomm.api.run_gate"
)


def load_runs(sources: Iterable) -> list[Run]:
    """Each source -> its runs: a JSON summary (1 run), a baseline JSON (its runs), a Run, a
    Result (nsyscomm.api.load) or a dict."""
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
            if not looks_json(p):
                raise InputError(_REPORT_PATH.format(p))
            out.extend(runs_from_json(read_json(p), str(p)))
    return out


def load_run(sources: Iterable) -> Run:
    """The current run: one JSON summary, document, Run or Result (the reports of one job, loaded
    by nsyscomm.api.load)."""
    sources = list(sources)
    if not sources:
        raise InputError("no current run given: pass report files, a folder of reports, or a JSON summary")
    runs = load_runs(sources)
    if len(runs) != 1:
        names = ", ".join(r.source for r in runs)
        raise InputError(
            f"the current side must be one run, got {len(runs)} ({names}); "
            f"pass one JSON summary or the reports of one job"
        )
    return runs[0]


def baseline_document(runs: list[Run], keep: int | None = None) -> dict:
    """Runs -> a baseline JSON document (schema 3, several runs; the newest last)."""
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
