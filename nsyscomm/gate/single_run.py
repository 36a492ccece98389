"""The gate's margin against a baseline of one run, which knows no noise band.

A host-timed job (gloo on CPU: no GPU kernels) or a key whose calls vary from call to call moves
a lot from run to run of the same code; against one run, a timing of such a key or run fails
only when worse than Settings.single_run_factor and by more than Settings.single_run_share of
the baseline run's time. Steady keys (NCCL kernels timed on the GPU) keep the plain thresholds.
docs/gate.md, "One baseline run", has the rule and the figures behind its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nsyscomm.gate.metrics import Metric, _num, per_rank
from nsyscomm.gate.settings import Settings, Threshold

# metrics that are time already summed over the calls; the others are per call (or per byte)
_TOTAL_TIME = {"comm_ms", "wait_ms", "exposed_ms", "total_ms"}


@dataclass(frozen=True)
class SingleRun:
    """The margin of a timing against a one-run baseline (Settings.single_run_*): worse by more
    than `factor`, and by more than `floor_ms` of time (a share of the baseline run's time).
    `calls`: how many times a per-call metric's change is paid; `avg_ms`: a key's latency, what
    its bandwidth costs."""

    factor: float
    floor_ms: float
    calls: float = 1.0
    avg_ms: float | None = None

    def threshold(self, metric: Metric, thr: Threshold) -> Threshold:
        if metric.unit not in ("ms", "GB/s"):
            return thr  # counts are the same from run to run: their own thresholds hold
        calls = 1.0 if metric.name in _TOTAL_TIME else max(self.calls, 1.0)
        if metric.better == "lower":
            return replace(thr, rel=max(thr.rel, (self.factor - 1) * 100), abs=max(thr.abs, self.floor_ms / calls))
        rel = (1 - 1 / self.factor) * 100
        if self.floor_ms and self.avg_ms:  # bandwidth down to 1/(1+x) costs x of the time it took
            rel = max(rel, (1 - 1 / (1 + self.floor_ms / (calls * self.avg_ms))) * 100)
        return replace(thr, rel=max(thr.rel, rel))

    def factor_only(self, metric: Metric, thr: Threshold) -> Threshold:
        """The margin without its floor of run time: worse than `factor` alone (a timing whose
        change a run's length does not scale, compared against several runs)."""
        return replace(self, floor_ms=0.0).threshold(metric, thr)


def _run_ms(doc: dict) -> float | None:
    """A run's time: its longest rank's elapsed time (None when the document has no ranks)."""
    elapsed = per_rank("ranks", "elapsed_ms")(doc)
    return max(elapsed.values()) if elapsed else None


# A key whose mean latency is this far from its median varies from call to call within the run, as
# host-timed collectives do (gloo on CPU, NVTX ranges) and NCCL kernels timed on the GPU do not;
# such keys vary the more from run to run (the figures: docs/gate.md).
NOISY_SPREAD = 0.2


def noisy_row(row: dict) -> bool:
    avg, p50 = _num(row.get("avg_ms")), _num(row.get("p50_ms"))
    return bool(avg is not None and p50 and abs(avg - p50) > NOISY_SPREAD * p50)


def host_timed(doc: dict) -> bool:
    """A run without GPU kernels (gloo on CPU): every call of it is timed on the host, where the
    scheduler's noise is in every figure. The overlap section says so (`timed_on`); a document
    without that key is host-timed when its overlap section has no rank (kernel-less calls had
    no overlap rows then)."""
    overlap = doc.get("overlap")
    if not isinstance(overlap, dict):
        return False
    if "timed_on" in overlap:
        return overlap["timed_on"] == "host"
    return "per_rank" in overlap and not overlap["per_rank"]


def _noisy_run(doc: dict) -> bool:
    """A host-timed run, or most of its collective time in keys that vary from call to call."""
    if host_timed(doc):
        return True
    rows = [r for r in doc.get("summary") or [] if isinstance(r, dict)]
    total = sum(_num(r.get("total_ms")) or 0.0 for r in rows)
    noisy = sum(_num(r.get("total_ms")) or 0.0 for r in rows if noisy_row(r))
    return total > 0 and noisy > total / 2


def single_run_margin(
    s: Settings, doc: dict, calls: float, avg_ms: float | None = None, noisy: bool = False
) -> SingleRun | None:
    """The single-run margin (SingleRun) for a value of doc's run; a run whose totals are sums of
    noisy keys (noisy: _noisy_run checked) only."""
    if s.single_run_factor <= 1 and s.single_run_share <= 0:
        return None
    if noisy and not _noisy_run(doc):
        return None
    floor = s.single_run_share / 100 * (_run_ms(doc) or 0.0)
    return SingleRun(s.single_run_factor, floor, calls, avg_ms)


def single_run_note(s: Settings, doc: dict) -> str:
    how = (
        "record several runs of the same code for a noise band: "
        "nsyscomm baseline --append --output BASELINE.json RUN (docs/gate.md, noise bands)"
    )
    rows = [r for r in doc.get("summary") or [] if isinstance(r, dict)]
    noisy = host_timed(doc) or any(noisy_row(r) for r in rows)
    if (s.single_run_factor <= 1 and s.single_run_share <= 0) or not noisy:
        return f"one baseline run: no noise band is known, the thresholds alone apply; {how}"
    run_ms = _run_ms(doc)
    floor = f" and by more than {s.single_run_share:g}% of its {run_ms:.0f} ms" if run_ms and s.single_run_share else ""
    return (
        f"one baseline run: no noise band is known, and its calls are timed on the host or vary (mean "
        f">{NOISY_SPREAD:.0%} off the median): a timing of theirs fails only when worse than "
        f"x{s.single_run_factor:g}{floor}; {how}"
    )
