"""Renderers of a gate Verdict: terminal (rich), markdown, JSON, JUnit XML."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table

from nsyscomm.gate import (
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
)
from nsyscomm.views.safe import markdown_text, visible_line
from nsyscomm.views.safe import markup_text as escape
from nsyscomm.views.units import signed_pct

_STYLE = {
    REGRESSION: "bold red",
    NEW: "red",
    MISSING: "yellow",
    WARN: "yellow",
    NOISE: "cyan",
    IMPROVEMENT: "green",
    OK: "",
    FEW_CALLS: "dim",
    SKIPPED: "dim",
}
_ICON = {REGRESSION: "❌", NEW: "🆕", MISSING: "➖", WARN: "⚠️", NOISE: "〰️", IMPROVEMENT: "✅", OK: "", FEW_CALLS: "·"}


def _v(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "":
        return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.4g}" if abs(x) < 1 else f"{x:.3f}"


def _pct(x: float | None) -> str:
    return signed_pct(x)  # a table cell: "-" when unknown, "new" for a value that was 0


def _band(c: Comparison) -> str:
    if c.band:
        return f"{_v(c.band[0], c.unit)}..{_v(c.band[1], c.unit)}"
    return "none (1 run)" if c.runs == 1 else ""


def rows(verdict: Verdict, show: str = "changed", max_ranks: int = 8) -> list[dict]:
    """Flat rows (one per shown comparison, or per new/missing key) shared by text and markdown."""
    out = []
    ranks = [i for i in verdict.items if i.scope == "rank" and (show == "all" or i.changed)]
    if show != "all" and len(ranks) > max_ranks:  # the worst ranks only: a 512-rank job must stay readable
        worst = sorted(
            ranks,
            key=lambda i: (
                not i.fails,
                -max((abs(c.rel_pct) for c in i.comparisons if c.rel_pct is not None), default=0),
            ),
        )
        keep = {id(i) for i in worst[:max_ranks]}
    else:
        keep = {id(i) for i in ranks}
    hidden = len(ranks) - len(keep)
    after_ranks = 0
    for it in verdict.items:
        if show != "all" and (not it.changed or it.status == FEW_CALLS):
            continue  # a key of a few calls is never gated: nothing there to act on (--show all lists it)
        if it.scope == "rank" and id(it) not in keep:
            continue
        if it.status in (NEW, MISSING):
            calls = it.current_calls if it.status == NEW else it.baseline_calls
            out.append(
                {
                    "status": it.status,
                    "item": it.name,
                    "metric": "key " + it.status,
                    "baseline": "-" if it.status == NEW else f"{_v(calls, '')} calls",
                    "current": f"{_v(calls, '')} calls" if it.status == NEW else "-",
                    "change": "",
                    "band": "",
                    "margin": "",
                    "note": it.note,
                    "fails": it.fails,
                }
            )
            continue
        for c in it.comparisons:
            if show != "all" and c.status in (OK, SKIPPED):
                continue
            unit = f" {c.unit}" if c.unit else ""
            out.append(
                {
                    "status": c.status,
                    "item": it.name,
                    "metric": c.label,
                    "baseline": _v(c.baseline, c.unit) + unit,
                    "current": _v(c.current, c.unit) + unit,
                    "change": _pct(c.rel_pct),
                    "band": _band(c),
                    "margin": c.margin,
                    "note": c.reason or (it.note if it.status == FEW_CALLS else ""),
                    "fails": c.fails,
                }
            )
        if it.scope == "rank":
            after_ranks = len(out)
    if hidden:
        out.insert(
            after_ranks,
            {
                "status": "",
                "item": f"... {hidden} more rank(s)",
                "metric": "",
                "baseline": "",
                "current": "",
                "change": "",
                "band": "",
                "margin": "",
                "note": "--show all or --format json lists them",
                "fails": False,
            },
        )
    return out


# the comparison table's columns and how each is justified
_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("status", "left"),
    ("op / size / n", "left"),
    ("metric", "left"),
    ("baseline", "right"),
    ("current", "right"),
    ("change", "right"),
    ("baseline band", "right"),
    ("margin", "right"),
    ("note", "left"),
)


def render_text(verdict: Verdict, console: Console, show: str = "changed") -> None:
    style = "bold red" if verdict.failed else "bold green"
    console.print(f"[{style}]{escape(verdict.headline())}[/]")
    console.print(
        f"baseline: {escape(', '.join(verdict.baselines))}  |  current: {escape(verdict.current)}", style="dim"
    )
    r = rows(verdict, show)
    if r:
        t = Table(box=box.SIMPLE_HEAD, title="What changed" if show != "all" else "Comparison", title_justify="left")
        for name, just in _COLUMNS:
            t.add_column(name, justify=just)
        for x in r:
            st = _STYLE.get(x["status"], "")
            t.add_row(
                f"[{st}]{x['status']}[/]" if st else x["status"],
                escape(x["item"]),
                escape(x["metric"]),
                x["baseline"],
                x["current"],
                f"[{st}]{x['change']}[/]" if st else x["change"],
                x["band"],
                x["margin"],
                escape(x["note"]),
            )
        console.print(t)
    else:
        console.print("nothing changed beyond the thresholds")
    for n in verdict.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")


def _md_escape(s: str) -> str:
    # report text is untrusted: inert Markdown, headings and lines included
    return markdown_text(s)


def _md_code(s: str) -> str:
    # a code span shows HTML literally; only a backtick (or a newline) could end it early
    return visible_line(str(s)).replace("`", "'").replace("|", "\\|")


def render_markdown(verdict: Verdict, show: str = "changed") -> str:
    icon = "❌" if verdict.failed else "✅"
    lines = [
        f"### {icon} nsyscomm gate: {_md_escape(verdict.headline())}",
        "",
        f"Baseline: {_md_escape(', '.join(verdict.baselines))} · current: {_md_escape(verdict.current)} · "
        f"compared per {verdict._level_name()}",
        "",
    ]
    r = rows(verdict, show)
    if r:
        lines += [
            "| | op / size / n | metric | baseline | current | change | baseline band | margin | note |",
            "|---|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for x in r:
            lines.append(
                "| "
                + " | ".join(
                    [
                        _ICON.get(x["status"], "") + " " + x["status"],
                        f"`{_md_code(x['item'])}`",
                        x["metric"],
                        x["baseline"],
                        x["current"],
                        f"**{x['change']}**" if x["fails"] else x["change"],
                        x["band"],
                        x["margin"],
                        _md_escape(x["note"]),
                    ]
                )
                + " |"
            )
    else:
        lines.append("Nothing changed beyond the thresholds.")
    if verdict.notes:
        lines.append("")
        lines += [f"- note: {_md_escape(n)}" for n in verdict.notes]
    return "\n".join(lines) + "\n"


def render_json(verdict: Verdict) -> str:
    def clean(o: object) -> object:
        if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
            return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(verdict.to_dict()), indent=2, allow_nan=False)


def _case_name(it: Item) -> tuple[str, str]:
    if it.scope == "key" and it.key is not None:
        return f"nsyscomm.gate.{it.key.op}", it.name
    return f"nsyscomm.gate.{it.scope}", it.name


def render_junit(verdict: Verdict) -> str:
    """One test case per key (and per rank, and the job totals); regressions are failures."""
    root = ET.Element("testsuites", name="nsyscomm gate")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="nsyscomm.gate",
        tests=str(len(verdict.items)),
        failures=str(len(verdict.failing)),
        errors="0",
        skipped=str(sum(1 for i in verdict.items if i.status == FEW_CALLS)),
    )
    for it in verdict.items:
        cls, name = _case_name(it)
        case = ET.SubElement(suite, "testcase", classname=cls, name=name, time="0")
        detail = []
        for c in it.comparisons:
            unit = f" {c.unit}" if c.unit else ""
            detail.append(
                f"{c.status:11} {c.label}: baseline {_v(c.baseline, c.unit)}{unit} -> "
                f"current {_v(c.current, c.unit)}{unit} ({_pct(c.rel_pct)})"
                + (f" band {_band(c)}" if c.band else "")
                + f" margin {c.margin}"
                + (f" [{c.reason}]" if c.reason else "")
            )
        text = "\n".join(detail) or it.note
        if it.fails:
            bad = [c for c in it.comparisons if c.fails]
            msg = (
                f"{it.name}: {it.status}"
                if not bad
                else f"{it.name}: " + ", ".join(f"{c.label} {_pct(c.rel_pct)}" for c in bad)
            )
            ET.SubElement(case, "failure", message=msg, type=it.status).text = text
        elif it.status == FEW_CALLS:
            ET.SubElement(case, "skipped", message=it.note)
            ET.SubElement(case, "system-out").text = text
        else:
            if it.note or detail:
                ET.SubElement(case, "system-out").text = (it.note + "\n" + text).strip()
    from nsyscomm.views.safe import xml_tree  # names may hold what XML 1.0 forbids

    xml_tree(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
