"""What the statistics set aside, in words: the calls that set up their communicator
and the warm-up steps. One list of lines for the text summary and the HTML report; reads only
the Result (its `setup` and `warmup`)."""

from __future__ import annotations

import pandas as pd

from nsyscomm.analyses.result import Result
from nsyscomm.views.units import human_bytes


def lines(result: Result) -> list[str]:
    """A line per setup collective and one for the warm-up steps; none when nothing was set aside."""
    out = []
    setup = result.setup
    for r in setup.itertuples(index=False):
        size = human_bytes(r.bytes) if pd.notna(r.bytes) else "size ?"
        where = f" at step {int(r.step)}" if pd.notna(r.step) else ""
        init = f", {r.init_ms:.3f} ms of it in NCCL's init ranges" if pd.notna(r.init_ms) else ""
        out.append(
            f"setup: {r.op} {size}{where} on {int(r.participants)} rank(s) took {r.took_ms:.3f} ms{init}: "
            f"communicator setup, left out of latency, bandwidth, per-rank and per-step statistics, "
            f"the what-if and the gate"
        )
    inits = [t["total_s"] for log in result.nccl_logs for t in getattr(log, "init_timings", [])]
    if inits:
        out.append(
            f"setup: NCCL's log (Init timings) gives {len(inits)} communicator init(s), the longest {max(inits):.2f} s"
        )
    st = result.startup
    if st["collectives"]:
        out.append(
            f"start-up: {st['collectives']} collective(s) were their ranks' first (arrival skew up to "
            f"{st['max_skew_ms']:.3f} ms, the processes' start-up): no rank named late for it, left out of "
            f"the arrival skew and the gate; the what-if's no_straggler keeps it"
        )
    w = result.warmup
    if w["steps"]:
        parts = "; ".join(f"step {p['step']} ({p['step_ms']:.3f} ms): {p['reason']}" for p in w["per_step"])
        out.append(f"warm-up: {parts}; left out of the what-if's job figures and the charts' scale")
    return out


def warmup_steps(result: Result) -> set[int]:
    return set(result.warmup["steps"])
