"""The what-if replay in the summary: its short "What-if" block, in every format
(nsyscomm.views.findings). Reads only Result.what_if_analysis; the JSON `diagnosis` keys
(what_if, attribution) are the contract's (nsyscomm.analyses.contract)."""

from __future__ import annotations

from nsyscomm.analyses.result import Result
from nsyscomm.views.units import human_key

TITLE = "What-if (replay across ranks; mean step time, ms saved per step)"


def lines(result: Result, top: int = 3) -> list[str]:
    """A few lines: the scenarios ranked by ms saved per step, each one's top keys (their sizes
    written as the tables write them); the top attribution of each dimension."""
    a = result.what_if_analysis
    rows = table_rows(a["what_if"])
    out = _reproduction_lines(a)
    if not rows:
        return out
    out += _warmup_lines(rows)
    all_steps = _counted_steps(rows)
    for r in rows:
        counted = sum(1 for s in r["steps"] if "withheld" not in s and not s.get("warmup"))
        keys = ", ".join(
            f"{human_key(k['key'])} {k['saved_ms'] / max(counted, 1):.3f}"
            for k in r["top_keys"][:top]
            if k["saved_ms"] > 0
        )
        out.append(
            f"{r['scenario']:<16} {r['step_ms_before']:10.3f} -> {r['step_ms_after']:10.3f} ms "
            f"saves {r['saved_ms']:9.3f} ms  (x{r['slowdown']:.3f})" + (f"  top: {keys}" if keys else "")
        )
        out += left_out_lines(r, all_steps)
    by: dict = {}
    for row in a["attribution"]:
        if row["slowdown"] > by.get(row["by"], {"slowdown": -1})["slowdown"]:
            by[row["by"]] = row
    if by:
        out.append(
            "slowdown over ideal, largest: "
            + ", ".join(f"{k} {human_key(str(v['key']))} x{v['slowdown']:.3f}" for k, v in by.items())
        )
    sm = a.get("straggler_model")
    if sm:
        share = {k: "-" if sm[k] is None else f"{sm[k]:.3f}" for k in ("Ms", "Mw")}
        out.append(
            f"straggler model (OSDI'25): S = {sm['blocking_slowdown']:.4f}, launch "
            f"{sm['launch_slowdown']:.4f}, M_S = {share['Ms']}, M_W = {share['Mw']}"
        )
    return out


def table_rows(rows: list[dict]) -> list[dict]:
    """The scenarios the What-if table lists, and so the only ones the headline may name."""
    return [r for r in rows if r.get("slowdown") is not None]


def _counted_steps(rows: list[dict]) -> set:
    """The steps some scenario counts (warm-up steps apart): the measured job every row's
    "before" is taken over, unless the row says which of them it leaves out."""
    return {s["step"] for r in rows for s in r["steps"] if "withheld" not in s and not s.get("warmup")}


def left_out_lines(row: dict, counted: set) -> list[str]:
    """Which of the counted steps a scenario leaves out, and why: its "before" is then the mean
    of fewer steps than the other rows'."""
    by: dict[str, list] = {}
    for s in row["steps"]:
        if "withheld" in s and s["step"] in counted:
            by.setdefault(s["withheld"], []).append(s["step"])
    return [
        f"  {row['scenario']} leaves out step(s) {', '.join(map(str, steps))} of its figures: {why}"
        for why, steps in by.items()
    ]


def _reproduction_lines(a: dict) -> list[str]:
    """How many steps the replay reproduces, and what is withheld and why (never its figures)."""
    rep = a.get("reproduction")
    out = []
    if rep and rep.get("steps"):
        tol = rep["tolerance"]
        out.append(
            f"replay with nothing changed reproduces {rep['reproduced']} of {rep['of']} step(s) within "
            f"{100 * tol['relative']:g}% (at least {tol['absolute_ms']:g} ms)"
        )
    for name, why in (a.get("withheld") or {}).items():
        out.append(f"{'what-if' if name == 'all' else name} withheld: {why}")
    return out


def _warmup_lines(rows: list[dict]) -> list[str]:
    """Which steps the means leave out (warm-up: nsyscomm.analyses.warmup), and what each scenario
    saves in them: a straggler there is named by the Diagnosis, so its figure is given too."""
    warm = rows[0].get("warmup_steps") or []
    if not warm:
        return []
    out = [f"(warm-up step(s) {', '.join(map(str, warm))} left out of these means and totals)"]
    more = [f"{r['scenario']} {warmup_saved_ms(r):.3f}" for r in rows if warmup_saved_ms(r) > 0]
    if more:
        out.append(f"(saved in those warm-up step(s), ms: {', '.join(more)})")
    return out


def warmup_saved_ms(row: dict) -> float:
    """What a what-if row's scenario saves in the warm-up steps its job figures leave out."""
    return float(sum(s["saved_ms"] for s in row.get("steps") or [] if s.get("warmup")))


def best_line(rows: list[dict]) -> str | None:
    """The headline what-if: the scenario that saves most per steady step, with what it saves in
    the warm-up steps left out of that figure; or, when only warm-up steps would gain, that."""
    rows = table_rows(rows)
    steady = [r for r in rows if r.get("saved_ms") and r["saved_ms"] > 0]
    warm = [r for r in rows if warmup_saved_ms(r) > 0]
    if not steady and not warm:
        return None
    if steady:
        b = max(steady, key=lambda r: r["saved_ms"])
        line = (
            f"best what-if: {b['scenario']} saves {b['saved_ms']:.3f} ms per step "
            f"({b['step_ms_before']:.3f} -> {b['step_ms_after']:.3f} ms)"
        )
    else:
        b = max(warm, key=warmup_saved_ms)
        line = f"best what-if: {b['scenario']} saves nothing in the steady steps"
    w = warmup_saved_ms(b)
    if w > 0:
        steps = ", ".join(map(str, b.get("warmup_steps") or []))
        line += f"; and {w:.3f} ms in all in warm-up step(s) {steps}, left out of that figure"
    return line
