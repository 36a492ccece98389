"""The diagnosis in the summary: the short "Diagnosis" block at its top, in every
format (nsyscomm.views.findings): the straggler, why, what it costs, the best what-if. Reads
only the Result (late, late_ranks, what_if); the JSON `diagnosis` rows are the contract's
(nsyscomm.analyses.contract)."""

from __future__ import annotations

from nsyscomm.analyses.contract import notes
from nsyscomm.analyses.result import Result
from nsyscomm.views import whatif_out


def lines(result: Result) -> list[str]:
    """At most a screen: per late rank its main cause and caller; what fixing it would save."""
    late = result.late
    per = result.late_by_rank
    out = []
    # the rank that cost the others the most waiting first: the straggler of every view
    for rank in result.late_ranks["rank"]:
        rows = per[per["rank"] == rank]
        total = rows["delay_ms"].sum()
        n = int(rows["count"].sum())
        top = rows.iloc[0]
        sample = late[(late["rank"] == rank) & (late["cause"] == top["cause"])].iloc[0]
        out.append(
            f"rank {int(rank)} arrived late {n} time(s), {total:.3f} ms in all: mostly {top['cause']} "
            f"({top['delay_ms']:.3f} ms, {int(top['count'])} call(s)) at {top['caller']}"
        )
        out.append(f"  why: {sample['detail']}")
        if len(out) >= 8:
            break
    best = whatif_out.best_line(result.what_if)
    if best:
        out.append(best)
    dims = result.dimensions
    known = dims[dims["dimension"] != "unknown"] if not dims.empty else dims
    if len(known):
        per = known.groupby("dimension")[["comm_ms", "wait_ms"]].sum().sort_values("comm_ms", ascending=False)
        out.append(
            "by dimension: "
            + ", ".join(f"{d} {r.comm_ms:.3f} ms comm ({r.wait_ms:.3f} waiting)" for d, r in per.iterrows())
        )
    out += notes(result)
    return out
