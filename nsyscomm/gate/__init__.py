"""CI performance-regression gate: compare a run's communication against one or more baseline runs.

One module per step: ``metrics`` (what is compared), ``settings`` (thresholds and policies),
``runs`` (documents, baselines and reports made comparable), ``verdict`` (the comparison) and
``outcome`` (what it produces);
this package is their front door.

    from nsyscomm import gate
    from nsyscomm import api, gate
    baselines = gate.load_runs(["baseline.json"])                  # one or several runs (noise band)
    current = gate.load_run([api.load(["new_run.sqlite"])])        # a Result, or a JSON summary
    verdict = gate.compare(baselines, current, gate.settings_from())
    verdict.exit_code                                              # 0 pass, 1 regression
    api.run_gate(["baseline.json"], ["new_run.sqlite"])            # the same, report paths loaded

The gate reads Results and schema-3 documents, never reports: nsyscomm.api loads them.

Everything compared is a *metric*: an entry of ``METRICS`` that reads one number per item from a
schema-3 JSON document (docs/architecture.md, "JSON contract"). Items are summary keys (op, bytes, group size[, caller]),
ranks, or the whole job. A metric is compared only when both sides carry it, so a new section
of the JSON (e.g. ``overlap`` with ``exposed_ms`` per rank) is one ``METRICS`` entry away.

Unusable input (no such file, broken JSON, wrong schema, bad config) raises ``InputError``
(exit status 2); a regression is a verdict (exit status 1), never an exception.
"""

from __future__ import annotations

from nsyscomm.gate.metrics import (
    BASELINE_KIND,
    FIX_BASELINE,
    LEVELS,
    METRIC_BY_ID,
    METRICS,
    POLICIES,
    SCHEMA_VERSION,
    Key,
    Metric,
    job_max,
    per_rank,
    summary_total,
)
from nsyscomm.gate.runs import (
    Run,
    baseline_document,
    load_run,
    load_runs,
    looks_json,
    read_json,
    run_from_doc,
    run_from_result,
    runs_from_json,
)
from nsyscomm.gate.settings import (
    Settings,
    Threshold,
    apply_config,
    config_table,
    find_pyproject,
    override,
    parse_metric_value,
    read_toml,
    settings_from,
)
from nsyscomm.gate.verdict import (
    FEW_CALLS,
    IMPROVEMENT,
    MISSING,
    NEW,
    NOISE,
    OK,
    REGRESSION,
    SKIPPED,
    WARN,
    Comparison,
    Item,
    Verdict,
    compare,
    compare_values,
    run_gate,
)

__all__ = [
    "BASELINE_KIND",
    "Comparison",
    "FEW_CALLS",
    "FIX_BASELINE",
    "IMPROVEMENT",
    "Item",
    "Key",
    "LEVELS",
    "METRICS",
    "METRIC_BY_ID",
    "MISSING",
    "Metric",
    "NEW",
    "NOISE",
    "OK",
    "POLICIES",
    "REGRESSION",
    "Run",
    "SCHEMA_VERSION",
    "SKIPPED",
    "Settings",
    "Threshold",
    "Verdict",
    "WARN",
    "apply_config",
    "baseline_document",
    "compare",
    "compare_values",
    "config_table",
    "find_pyproject",
    "job_max",
    "load_run",
    "load_runs",
    "looks_json",
    "override",
    "parse_metric_value",
    "per_rank",
    "read_json",
    "read_toml",
    "run_from_doc",
    "run_from_result",
    "run_gate",
    "runs_from_json",
    "settings_from",
    "summary_total",
]
