"""What the gate's comparison produces: one Comparison per metric, one Item per key, rank or the
job, and the Verdict over them, each with its JSON form (docs/gate.md, "Output")."""

from __future__ import annotations

from dataclasses import dataclass, field

from nsyscomm import __version__
from nsyscomm.gate.metrics import SCHEMA_VERSION, Key
from nsyscomm.gate.settings import Settings, Threshold
from nsyscomm.views.units import signed_pct

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
    threshold: Threshold  # the one applied: widened for a one-run baseline (single_run)
    status: str
    reason: str = ""
    single_run: bool = False  # the single-run margin (or its factor) applied: one run, or a host-timed one

    @property
    def fails(self) -> bool:
        return self.status == REGRESSION

    @property
    def margin(self) -> str:
        """What a change had to exceed to fail, in words: "+10% and 0.01 ms", "-50%"."""
        t = self.threshold
        if self.better == "higher":
            return f"-{t.rel:g}%" + (f" and {t.abs:.3g} {self.unit}".rstrip() if t.abs else "")
        return f"+{t.rel:g}%" + (f" and {t.abs:.3g} {self.unit}".rstrip() if t.abs else "")

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
            "single_run": self.single_run,
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
    hang: str | None = None  # why the current run hung or desynced: it fails whatever its numbers

    @property
    def failed(self) -> bool:
        return self.hang is not None or any(i.fails for i in self.items)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    @property
    def failing(self) -> list[Item]:
        return [i for i in self.items if i.fails]

    def headline(self) -> str:
        f = self.failing
        if not f and self.hang:
            return f"FAIL: {self.hang}"
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
            "hang": self.hang,
            "settings": self.settings.to_dict(),
            "items": [i.to_dict() for i in self.items],
        }


def _pct(x: float | None) -> str:
    return signed_pct(x, none="n/a", up="+inf%", down="-inf%")  # in a reason's words
