"""combine(): a job's extracts -> its analyses Result, in order: calls typed, ranks assigned,
clocks aligned, the collectives table built (sql/collectives.sql), then the tables the
analyses read (logical collectives, rank spans, bus-bandwidth factors) and the job's warnings."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pandas as pd

from nsyscomm import busbw, duck
from nsyscomm.analyses.overlap import begin_overlap
from nsyscomm.analyses.result import Result
from nsyscomm.combine import clocks, joined, select, setup, window
from nsyscomm.combine.calls import (
    SELECT_NEEDS,
    TIME_COLS,
    JobCalls,
    Needs,
    create_collectives,
    hand_back,
    register,
    register_report_tables,
)
from nsyscomm.combine.ranks import assign_ranks
from nsyscomm.combine.select import Selection
from nsyscomm.ingest.extract_type import TABLES, Extract


def combine(
    extracts: list[Extract],
    by_caller: bool = False,
    calls: JobCalls | None = None,
    sources: Iterable = (),
    selection: Selection | None = None,
) -> Result:
    """The extracts of a job's reports -> its Result. calls: their calls, gathered as they
    arrived (load() does that); by default taken from the extracts. sources: the input paths,
    whose flight records (beside the reports) tell the calls that never completed. selection:
    only those steps and ops (every call by default). Once the job's database holds the per-report
    tables, the list's extracts are replaced by ones without their rows (calls.let_go)."""
    selection = selection or Selection()
    if calls is None:
        calls = JobCalls()
        for i, e in enumerate(extracts):
            calls.add(i, e)
    con = calls.con
    warnings = list(dict.fromkeys(w for e in extracts for w in e.warnings))  # a note each extract made once
    offsets = clocks.session_offsets(extracts)
    shifted = any(offsets.values())
    proc_ranks, rank_warnings = assign_ranks(extracts, calls.pids)
    warnings += rank_warnings
    calls.finish()  # view calls_typed
    # absurd timestamps (end before start) would give negative latencies: leave those calls out
    where = "op IS NOT NULL AND (cpu_end < cpu_start OR gpu_end < gpu_start) IS NOT TRUE"
    # and, of the calls kept, those matched across ranks by call order only (no nsyscomm or NCCL
    # payload metadata, and no sequence number from their source: sql/call_spans.sql numbers those);
    # and, in the same scan, the parts of sql/call_spans.sql that any call needs (calls.Needs)
    skipped, backwards, by_order, *need = duck.one_row(
        con,
        "SELECT count(*) FILTER (WHERE op IS NULL), "
        "count(*) FILTER (WHERE cpu_end < cpu_start OR gpu_end < gpu_start), "
        f"count(*) FILTER (WHERE {where} AND seq IS NULL "
        "AND source NOT IN ('wrapper', 'nccl_payload', 'whatif_trace', 'nccl_inspector')), "
        f"{SELECT_NEEDS} FROM calls_typed",
    )
    needs = Needs(*(bool(n) for n in need))
    if skipped:
        warnings.append(f"{skipped} call(s) of unknown operation skipped")
    if backwards:
        warnings.append(f"{backwards} call(s) end before they start (corrupt timestamps): left out")
    if shifted:
        # each report's clock offset (_shift) applies to its calls as they are read
        con.execute("CREATE TEMP TABLE report_offsets (report VARCHAR, off BIGINT)")
        con.executemany("INSERT INTO report_offsets VALUES (?, 0)", [[e.report] for e in extracts])
        sets = ", ".join(f"c.{t} + o.off AS {t}" for t in TIME_COLS)
        con.execute(
            f"CREATE TEMP VIEW calls AS SELECT c.* REPLACE ({sets}) FROM calls_typed c "
            f"JOIN report_offsets o ON o.report = c.report WHERE {where}"
        )
    else:
        con.execute(f"CREATE TEMP VIEW calls AS SELECT * FROM calls_typed WHERE {where}")
    register(
        con,
        "proc_ranks",
        proc_ranks,
        "report::VARCHAR AS report, pid::BIGINT AS pid, rank::INTEGER AS rank, "
        "local_rank::INTEGER AS local_rank, host::VARCHAR AS host",
    )
    # every per-report table the analyses read, typed as nsyscomm.ingest.extract_type.TABLES
    # declares them; the largest (made_late) once the collectives are made, unless the clocks are
    # shifted below, which updates it
    late = [] if shifted else [t for t in TABLES if t.made_late]
    register_report_tables(con, extracts, [t for t in TABLES if t not in late])
    if shifted:
        clocks.shift(con, offsets)
    duck.release_arrow_memory()  # what the extraction's Arrow tables and the extracts' rows held
    create_collectives(con, needs)
    if shifted:
        warnings += clocks.refine(con, extracts[0].report, functools.partial(create_collectives, needs=needs))
    # the job's database holds every call now: their Arrow copy goes, and the largest per-report
    # tables take its place, each copied while the steps below run (a copy keeps one core busy;
    # made beside the collectives, they added to that query's peak)
    calls.release()
    duck.release_arrow_memory()
    made_late = register_report_tables(con, extracts, late, soon=True)
    setup.mark_unfinished(con, sources)
    joined.align_steps(con)
    if any(e.windowed for e in extracts):
        cut = window.trim_partial_steps(con)
        warnings += [cut] if cut else []
    # plain tables, not TEMP ones, from here on: the views' queries run on cursors too (Result.prefetch)
    con.execute(f"CREATE TABLE rank_spans AS {duck.sql('rank_spans')}")
    con.execute(f"CREATE TABLE logical_collectives AS {duck.sql('logical_collectives')}")
    setup.mark_setup(con)
    setup.mark_startup(con)
    if selection:  # the asked-for steps and ops, once the whole job's setup and first meetings are known
        select.keep(con, selection)
        select.clip_spans(con, selection)
    # what the warnings below count, in one scan of the collectives
    max_n, unsized = duck.one_row(con, duck.sql("job_checks"))
    max_n = int(max_n)
    factors = pd.DataFrame(
        [(op, n, busbw.busbw_factor(op, n)) for op in busbw.OPS for n in range(1, max(2, max_n) + 1)],
        columns=["op", "group_size", "factor"],
    )
    register(con, "busbw_factors", factors, "op, group_size::INTEGER AS group_size, factor::DOUBLE AS factor")
    # point-to-point calls have one participant per side by nature
    unmatched = duck.scalar(
        con, "SELECT count(*) FROM logical_collectives WHERE participants < group_size AND op NOT IN ('send', 'recv')"
    )
    if unmatched:
        warnings.append(
            f"{unmatched} logical collective(s) were seen on fewer ranks than their group size "
            f"(ranks missing from the input, or calls outside the capture window)"
        )
    if by_order:
        warnings.append(
            f"{by_order} call(s) without nsyscomm or NCCL payload metadata: matched across ranks by "
            f"call order, group size inferred from the matched ranks"
        )
    if unsized:
        warnings.append(f"{unsized} call(s) of unknown message size: no bandwidth for them")
    # each call's part of exposed communication (numpy, one core) is made once the steps above
    # are done (their queries' working memory, the logical collectives' the largest, is not
    # added to its arrays), while the largest per-report tables may still be copying and beside
    # the first views' queries
    parts = begin_overlap(con)
    for made in made_late:
        made.result()
    duck.release_arrow_memory()  # the stacked rows they were copied from
    # and what DuckDB's allocator kept of the job stage's queries (duck.connect): the analyses'
    # queries would otherwise add their working memory on top of it
    hand_back(con)
    out = Result(con, [e.report for e in extracts], warnings, by_caller, overlap_parts=parts)
    out.selection = selection
    return out
