"""What the statistics set aside, in words: the calls that set up their communicator
and the warm-up steps. One list of lines for the text summary and the HTML report; reads only
the Result (its `setup`, `warmup`, `startup` and `joined`)."""

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
    out += _first_meeting_lines(result.startup)
    out += _joined_lines(result.joined)
    w = result.warmup
    if w["steps"]:
        parts = "; ".join(f"step {p['step']} ({p['step_ms']:.3f} ms): {p['reason']}" for p in w["per_step"])
        out.append(f"warm-up: {parts}; left out of the what-if's job figures and the charts' scale")
    return out


def _joined_lines(joined: pd.DataFrame) -> list[str]:
    """A line per rank that joined early under Join: the step, and what its shadows are not."""
    out = []
    for r in joined.itertuples(index=False):
        steps = (
            f"step {int(r.first_step)}"
            if r.first_step == r.last_step
            else f"steps {int(r.first_step)}-{int(r.last_step)}"
        )
        out.append(
            f"joined: rank {int(r.rank)} ran out of inputs and joined at step {int(r.step)} "
            f"(torch.distributed.algorithms.Join); its {int(r.shadow_calls)} call(s) after, in {steps}, shadow the "
            f"other ranks' collectives: its waiting there is its absence, no rank's lateness "
            f"(no late arrival, skew or what-if saving counted)"
        )
    return out


def _first_meeting_lines(st: dict) -> list[str]:
    """The job's first meetings: what start-up explains is set aside; the rank that came later
    than that is named, with how much, here as in the Diagnosis."""
    out = []
    for r in st["rows"].itertuples(index=False):
        if r.skew_ms < 0.1:  # the noise of late arrivals (nsyscomm.analyses.late): nothing to say
            continue
        who = f"rank {int(r.last_rank)} came last, {r.skew_ms:.3f} ms after the first"
        where = f"{r.op}" + (f" at step {int(r.step)}" if pd.notna(r.step) else "")
        if r.set_aside:
            out.append(
                f"start-up: the ranks' first collective ({where}): {who}, which their start explains "
                f"({r.startup_ms:.3f} ms): no rank named late for it, left out of the arrival skew and the gate; "
                f"the what-if's no_straggler keeps it"
            )
        else:
            out.append(
                f"start-up: the ranks' first collective ({where}): {who}; their start explains "
                f"{r.startup_ms:.3f} ms of it, the other {r.late_ms:.3f} ms is lateness: rank "
                f"{int(r.last_rank)} is named late in the Diagnosis and the what-if counts it; "
                f"the gate's arrival and wait figures leave first meetings out"
            )
    return out


def warmup_steps(result: Result) -> set[int]:
    return set(result.warmup["steps"])
