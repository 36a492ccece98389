"""The calls a user asked for (`--steps A:B`, `--ops OP[,OP]`): the job's tables are cut to them
once, as the job is combined, so that every analysis and every view reads the same calls
(DeepSpeed's prof_ops and its per-N-iterations summaries). The cut comes after the whole job's
setup calls and first meetings are marked (a communicator's first call is setup whatever range
is asked for, and a range's first collective is no start-up), and before any statistic: skew,
steps, exposure and the what-if are computed over what is kept. A logical collective is kept or
dropped whole, by its own step (its ranks' calls may straddle a step boundary)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from nsyscomm import duck
from nsyscomm.errors import InputError


@dataclass(frozen=True)
class Selection:
    """Steps [lo, hi) (either end open when None) and op names; empty: every call."""

    steps: tuple[int | None, int | None] | None = None
    ops: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.steps is not None or bool(self.ops)

    def describe(self) -> str:
        parts = []
        if self.steps is not None:
            lo, hi = self.steps
            parts.append(f"steps {'' if lo is None else lo}:{'' if hi is None else hi}")
        if self.ops:
            parts.append("ops " + ",".join(self.ops))
        return " and ".join(parts)


# the logical collectives outside the selection ($by_op: only ops $ops; $by_step: only steps
# [$lo, $hi), either end open when NULL), then the rows of the tables keyed by them
_DROP_LOGICAL = """DELETE FROM logical_collectives
    WHERE NOT ((NOT $by_op OR list_contains($ops::VARCHAR[], op))
               AND (NOT $by_step OR (step IS NOT NULL AND ($lo::BIGINT IS NULL OR step >= $lo::BIGINT)
                                     AND ($hi::BIGINT IS NULL OR step < $hi::BIGINT))))"""
_DROP_ROWS = (
    "DELETE FROM collectives WHERE logical_id NOT IN (SELECT logical_id FROM logical_collectives)",
    "DELETE FROM first_meetings WHERE logical_id NOT IN (SELECT logical_id FROM logical_collectives)",
    "DELETE FROM setup_ids WHERE logical_id NOT IN (SELECT logical_id FROM logical_collectives)",
)


def keep(con: duckdb.DuckDBPyConnection, sel: Selection) -> None:
    """Delete the calls outside the selection from `collectives`; a selection that names what the
    job does not have is refused (InputError naming what it has) rather than an empty summary."""
    if not sel:
        return
    if sel.ops:
        have = [r[0] for r in con.execute("SELECT DISTINCT op FROM collectives ORDER BY op").fetchall()]
        unknown = [o for o in sel.ops if o not in have]
        if unknown:
            raise InputError(f"--ops {','.join(unknown)}: not an op of this job (its ops: {', '.join(have) or 'none'})")
    first = last = None
    if sel.steps is not None:
        first, last = duck.one_row(con, "SELECT min(step), max(step) FROM collectives")
        if first is None:
            raise InputError(
                f"--{sel.describe()}: the reports record no training steps (the nsyscomm wrapper "
                "numbers them at each optimizer.step(), a PyTorch profiler trace by its ProfilerStep#N ranges)"
            )
    lo, hi = sel.steps if sel.steps is not None else (None, None)
    con.execute(
        _DROP_LOGICAL,
        {"by_op": bool(sel.ops), "ops": list(sel.ops), "by_step": sel.steps is not None, "lo": lo, "hi": hi},
    )
    for drop in _DROP_ROWS:
        con.execute(drop)
    if not duck.scalar(con, "SELECT count(*) FROM collectives"):
        where = f" (the job's steps are {first} to {last})" if sel.steps is not None else ""
        raise InputError(f"--{sel.describe()}: no calls there{where}")


def clip_spans(con: duckdb.DuckDBPyConnection, sel: Selection) -> None:
    """With a step range, each rank's elapsed time (`rank_spans`, what % comm divides by) is the
    part of its run the range covers: from the first kept call's start to the last one's end,
    on any rank (a rank that arrives late began the range as early as the others did)."""
    if sel.steps is None:
        return
    con.execute(
        """UPDATE rank_spans SET first_ns = greatest(rank_spans.first_ns, k.kept_first),
                                 last_ns = least(rank_spans.last_ns, k.kept_last)
           FROM (SELECT min(least(cpu_start, exec_start)) AS kept_first,
                        max(greatest(cpu_end, exec_end, wait_end)) AS kept_last
                 FROM collectives) k"""
    )
