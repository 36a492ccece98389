"""The library's front door, under the CLI: load() runs the pipeline (docs/architecture.md,
"Pipeline"): discover the reports, extract each (map), combine them into one job (reduce), and
return the analyses' Result. Every CLI command is a call into here; the names below stay
importable from nsyscomm.api for users."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd

from nsyscomm import duck
from nsyscomm.analyses.result import SCHEMA_VERSION, Result
from nsyscomm.combine import JobCalls, Selection, combine, one_job
from nsyscomm.discover import discover, report_names, sample_jobs, sample_reports_dir, survey
from nsyscomm.errors import InputError
from nsyscomm.extract.readers import extract_one
from nsyscomm.ingest import formats

if TYPE_CHECKING:
    from nsyscomm.gate import Settings, Verdict

__all__ = [
    "SCHEMA_VERSION",
    "Result",
    "combine",
    "discover",
    "extract_one",
    "environment",
    "gate_sources",
    "load",
    "run_gate",
    "sample_jobs",
    "sample_reports_dir",
]


def load(
    paths: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
    *,
    by_caller: bool = False,
    nccl_logs: Iterable[str | os.PathLike] = (),
    jobs: int | None = None,
    cache: bool = True,
    dask: str | None = None,
    memory_limit: str | None = None,
    merge: bool = False,
    steps: tuple[int | None, int | None] | None = None,
    ops: Iterable[str] = (),
) -> Result:
    """Reports -> one job's Result. nccl_logs: NCCL_DEBUG=INFO / nccl-tests outputs giving the
    job's NCCL context and a reference bandwidth curve. memory_limit: DuckDB's memory per process
    ("4GB", "50%"; else NSYSCOMM_MEMORY_LIMIT, else DuckDB's default); past it, it spills to disk.
    Reports that cannot be one job are refused (InputError naming what differs: combine.one_job)
    unless merge=True. steps (lo, hi) and ops: only the calls of steps lo..hi-1 and of those ops,
    for every analysis (nsyscomm.combine.select)."""
    found = survey(paths)
    files = found.files
    names = report_names(files)
    from nsyscomm.extract import pool  # jobs/cache/dask: parallel extraction, Parquet cache, Dask cluster

    with duck.memory_limit(memory_limit), duck.small_input(files):
        calls = JobCalls()
        extracts = pool.extract_many(files, names, jobs=jobs, cache=cache, dask=dask, consume=calls.add)
        if not merge:
            try:
                one_job.check(extracts, calls.pids)
            except InputError:
                # one job recorded by two sources: each read on its own, the second compared
                same = _two_sources(
                    files, nccl_logs, dict(by_caller=by_caller, jobs=jobs, cache=cache, dask=dask, steps=steps, ops=ops)
                )
                if same is None:
                    raise
                return same
        selection = Selection(steps, tuple(ops))
        result = combine(extracts, by_caller=by_caller, calls=calls, sources=files, selection=selection)
        result.op_trace = formats.op_trace(files)  # compute ops too, for the what-if replay
    result.sources = list(files)
    result.skipped = [(str(p), why) for p, why in found.skipped]
    if nccl_logs:
        from nsyscomm.ingest import nccl_log

        result.nccl_logs = [nccl_log.parse(p) for p in nccl_logs]
        curves = [c for c in (nccl_log.reference_curve(p) for p in nccl_logs) if len(c)]
        result.reference = pd.concat(curves, ignore_index=True) if curves else None
        result.warnings += [w for log in result.nccl_logs for w in log.warnings]
        from nsyscomm.analyses import nccl_context

        result.warnings += nccl_context.mismatches(result.con, result.nccl_logs, nccl_context.versions(extracts))
    return result


def _two_sources(files: list, nccl_logs: Iterable, kw: dict) -> Result | None:
    """The files of two formats, each one job of as many ranks: the first format's Result, with
    lines saying where the second disagrees (nsyscomm.analyses.two_sources); None when they are
    not that."""
    by_format: dict[str, list] = {}
    for f in files:
        fmt = formats.sniff(f)
        by_format.setdefault(fmt.name if fmt else "", []).append(f)
    if len(by_format) != 2 or "" in by_format:
        return None
    (na, fa), (nb, fb) = by_format.items()
    try:
        first, second = load(fa, nccl_logs=nccl_logs, **kw), load(fb, **kw)
    except InputError:
        return None
    ranks = [r.collectives["rank"].nunique() for r in (first, second)]
    if not ranks[0] or ranks[0] != ranks[1]:
        return None
    from nsyscomm.analyses.two_sources import compare

    agree, lines = compare(first, second, (_named(na, fa), _named(nb, fb)))
    if not agree:  # not one call alike: two jobs after all
        return None
    first.warnings += lines
    first.sources = list(files)
    return first


def _named(fmt: str, files: list) -> str:
    return f"the {fmt}" if len(files) == 1 else f"the {fmt}s"


def gate_sources(
    sources: Iterable,
    *,
    one_job: bool = False,
    steps: tuple[int | None, int | None] | None = None,
    ops: Iterable[str] = (),
) -> list:
    """Sources for nsyscomm.gate, its report paths loaded: JSON summaries and baselines, documents,
    Results and Runs stay as they are; each report path (a file, folder or glob) becomes its own
    job's Result, or with one_job=True all of them one job's, first (the current side of a gate).
    steps and ops: only those calls of each report loaded (load's)."""
    ops = tuple(ops)
    from pathlib import Path

    from nsyscomm.gate import looks_json

    sources = list(sources)
    is_report = [isinstance(s, (str, os.PathLike)) and not looks_json(Path(s)) for s in sources]
    if one_job:
        reports = [Path(s) for s, r in zip(sources, is_report) if r]
        return ([load(reports, steps=steps, ops=ops)] if reports else []) + [
            s for s, r in zip(sources, is_report) if not r
        ]
    return [load([Path(s)], steps=steps, ops=ops) if r else s for s, r in zip(sources, is_report)]


def run_gate(baseline_sources: Iterable, current_sources: Iterable, settings: Settings | None = None) -> Verdict:
    """Compare a current run against baseline runs (nsyscomm.gate.run_gate), loading the report
    paths among them: the library call behind ``nsyscomm gate``, with the same verdict. A current
    run that hung or desynced fails whatever its numbers (``Verdict.hang`` says why)."""
    from nsyscomm import gate

    return gate.run_gate(gate_sources(baseline_sources), gate_sources(current_sources, one_job=True), settings)


def environment(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> dict:
    """The recorded environment of the reports at paths (``summarize --include-env``)."""
    from nsyscomm.ingest.nsys import environment as env

    return env.for_reports(discover(paths))
