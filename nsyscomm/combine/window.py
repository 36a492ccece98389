"""A capture window's edges (`nsyscomm run --steps A:B`, docs/capture.md): every rank keeps the
same steps. The capture drops each rank's calls outside its own window (sql/calls_nsys.sql); a
step that the edges of the one collection nsys makes for the whole job still cut on some rank is
left out on every rank here, and said so in one line (sql/window_partial_steps.sql)."""

from __future__ import annotations

import duckdb

from nsyscomm import duck


def trim_partial_steps(con: duckdb.DuckDBPyConnection) -> str | None:
    """Delete from collectives the calls of the window's first and last steps where a collective
    misses a rank; returns the line that says so, None when no step was cut."""
    cut = con.execute(duck.sql("window_partial_steps")).fetchall()
    if not cut:
        return None
    steps = [int(step) for step, _edge, _calls, _short in cut]
    calls = sum(int(n) for _step, _edge, n, _short in cut)
    con.execute("DELETE FROM collectives WHERE list_contains($steps, step)", {"steps": steps})
    where = "; ".join(
        f"step {int(step)} ({edge} of the window) cut on rank(s) {', '.join(map(str, short or []))}"
        for step, edge, _n, short in cut
    )
    return f"capture window: {where}: left out on every rank ({calls} call(s)), so that every rank keeps the same steps"
