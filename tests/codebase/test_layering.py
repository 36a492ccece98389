"""The pipeline's layering (docs/architecture.md, "Layers"), read from the source with ast:
imports go downward only, no import cycle among nsyscomm's modules, and views read a Result,
never a report nor a database. Every import counts, the ones inside functions too: a lazy
upward import is the same climb back up the pipeline (api -> scale -> cache -> api was one).

Data flows cli -> discover -> extract -> combine -> analyses -> views / gate, with ingest under
discover and extract. Imports follow who calls whom and whose types one reads, so their order is
not quite the flow's: api calls each stage; a stage imports the types of the one that feeds it
(combine reads ingest's Extract, views read analyses' Result); ingest (the report formats) is
at the bottom, usable by every stage above it."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import nsyscomm

PKG = Path(nsyscomm.__file__).resolve().parent

# top to bottom; a module may import its own layer and the ones below it
LAYERS: list[tuple[str, ...]] = [
    ("nsyscomm.cli", "nsyscomm.commands", "nsyscomm.api"),  # the front doors: run the pipeline
    ("nsyscomm.views", "nsyscomm.gate"),  # read a Result
    ("nsyscomm.discover",),  # paths -> report files
    ("nsyscomm.extract",),  # report -> Extract (pool, cache, reader choice)
    ("nsyscomm.combine",),  # Extracts -> one job's Result
    ("nsyscomm.analyses",),  # Result and the analyses over it
    ("nsyscomm.ingest",),  # the report formats
]
# helpers every layer may use (no pipeline stage of their own); "nsyscomm" itself: __version__
BASE = (
    "nsyscomm",
    "nsyscomm.errors",
    "nsyscomm.settings",
    "nsyscomm.schema",
    "nsyscomm.duck",
    "nsyscomm.temp_folders",
    "nsyscomm.bundled",
    "nsyscomm.busbw",
    "nsyscomm.nvtx_format",
    "nsyscomm.sql",
    "nsyscomm.sample_reports",
)
# aside from the pipeline: the capture side runs in the profiled job; synth only makes test reports
ASIDE = ("nsyscomm.capture", "nsyscomm.synth")
VIEWS_MAY_NOT = ("duckdb", "sqlite3", "nsyscomm.discover", "nsyscomm.extract", "nsyscomm.ingest")

# known upward imports still to remove: none since the gate and the environment view read a
# Result; an entry here (module -> why) leaves that module out of its check until it is fixed
PENDING_UPWARD: dict[str, str] = {}
PENDING_CYCLES: dict[str, str] = {}
PENDING_VIEW_READS: dict[str, str] = {}
# views that run SQL on the Result's connection themselves (what they need becomes a Result method)
SQL_CALLS = ("execute", "executemany", "sql", "con")
PENDING_SQL: dict[str, str] = {}


def _name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return (PKG.parent / name.replace(".", "/") / "__init__.py").is_file()


@functools.cache
def imports(name: str) -> frozenset[str]:
    """Every module `name` imports (absolute names; `from pkg import mod` counts as pkg.mod)."""
    tree = ast.parse(MODULES[name].read_text())
    here = name if _is_package(name) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            out |= subs
            if len(subs) < len(node.names):  # names defined in base itself
                out.add(base)
    return frozenset(out)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or (p != "nsyscomm" and name.startswith(p + ".")) for p in prefixes)


def layer(name: str) -> int | None:
    """The layer of a module (0 = top), None for the helpers and the modules aside."""
    if _under(name, BASE) or _under(name, ASIDE):
        return None
    for i, prefixes in enumerate(LAYERS):
        if _under(name, prefixes):
            return i
    return None


def _own(name: str) -> set[str]:
    return {m for m in imports(name) if m.startswith("nsyscomm") and m != name}


def _violations(modules, check, pending: dict[str, str] | None = None) -> list[str]:
    """What `check` says is wrong with each module (None: nothing), one line per module; a
    module listed in `pending` is a known exception, left out until it is fixed."""
    out = []
    for m in modules:
        if pending and m in pending:
            continue
        found = check(m)
        if found:
            out.append(f"{m}: {found}")
    return out


def _assert_none(what: str, found: list[str]) -> None:
    assert not found, f"{len(found)} modules {what}:\n" + "\n".join(found)


PIPELINE = [m for m in MODULES if layer(m) is not None]


def _upward(module: str) -> str | None:
    mine = layer(module)
    up = sorted(m for m in _own(module) if (layer(m) is not None and layer(m) < mine))
    return f"(layer {mine}) imports upward: {up}" if up else None


def test_imports_only_downward():
    _assert_none("import upward", _violations(PIPELINE, _upward, PENDING_UPWARD))


def test_pipeline_does_not_import_synth():
    """nsyscomm.synth makes test reports; nothing at run time uses it."""

    def synth(module: str) -> str | None:
        hit = sorted(m for m in _own(module) if _under(m, ("nsyscomm.synth",)))
        return f"imports {hit}" if hit else None

    _assert_none("import nsyscomm.synth", _violations([m for m in MODULES if not _under(m, ASIDE)], synth))


def test_gate_reads_the_contract_not_a_view():
    """The gate compares schema-3 documents made from a Result by nsyscomm.analyses.contract; a
    view (json_out, text, ...) is what a user reads, not what the gate computes from."""

    def views(module: str) -> str | None:
        hit = sorted(m for m in _own(module) if _under(m, ("nsyscomm.views",)) and m != "nsyscomm.views.units")
        return f"reads views: {hit}" if hit else None

    _assert_none("of the gate read a view", _violations([m for m in MODULES if _under(m, ("nsyscomm.gate",))], views))


VIEWS = [m for m in MODULES if _under(m, ("nsyscomm.views",))]


def test_views_read_only_a_result():
    def reads(module: str) -> str | None:
        bad = sorted(m for m in imports(module) if _under(m, VIEWS_MAY_NOT))
        return f"opens reports or runs SQL itself ({bad}): views read a Result" if bad else None

    _assert_none("of the views read more than a Result", _violations(VIEWS, reads, PENDING_VIEW_READS))


def _sql_uses(name: str) -> list[str]:
    """`x.execute(...)`, `x.sql(...)`, `x.con` in a module: SQL run, or a connection reached."""
    tree = ast.parse(MODULES[name].read_text())
    return sorted(
        {f"line {n.lineno}: .{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in SQL_CALLS}
    )


def test_views_run_no_sql():
    def sql(module: str) -> str | None:
        uses = _sql_uses(module)
        return f"runs SQL on a connection ({uses[:5]}): views read Result methods" if uses else None

    _assert_none("of the views run SQL", _violations(VIEWS, sql, PENDING_SQL))


@functools.cache
def _graph() -> dict[str, set[str]]:
    graph = {m: {d for d in _own(m) if d in MODULES} for m in MODULES}
    # a package's __init__ re-exporting its modules is not a cycle with them; nor is the root
    # package's lazy nsyscomm.load (every module may read nsyscomm.__version__)
    for m in graph:
        graph[m] = {d for d in graph[m] if not (d.startswith(m + ".") and _is_package(m))}
    graph["nsyscomm"] = set()
    return graph


def _cycle_through(module: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path module -> ... -> module, or None."""
    seen: set[str] = set()
    todo: list[tuple[str, list[str]]] = [(d, [module, d]) for d in sorted(graph[module])]
    while todo:
        m, path = todo.pop()
        if m == module:
            return path
        if m in seen:
            continue
        seen.add(m)
        todo += [(d, path + [d]) for d in sorted(graph[m])]
    return None


def test_no_import_cycle():
    def cycle(module: str) -> str | None:
        path = _cycle_through(module, _graph())
        return "import cycle: " + " -> ".join(path) if path else None

    _assert_none("are on an import cycle", _violations(MODULES, cycle, PENDING_CYCLES))


# ingest/ holds one package per input format, and at its top what the formats share
FORMAT_PACKAGES = sorted(
    m for m in MODULES if m.startswith("nsyscomm.ingest.") and m.count(".") == 2 and _is_package(m)
)
REGISTRY = "nsyscomm.ingest.formats"  # the one module that knows every format


def _format_of(name: str) -> str | None:
    return next((f for f in FORMAT_PACKAGES if _under(name, (f,))), None)


def test_a_format_reads_no_other_format():
    """A format's package imports the shared modules and its own, never another format's: what
    two formats share sits at ingest's top (limits, bounded, names, busy, extract_type); only the
    registry of formats imports them all."""

    def other_formats(module: str) -> str | None:
        mine = _format_of(module)
        other = sorted(m for m in _own(module) if _format_of(m) not in (None, mine))
        return f"imports another format's modules: {other}" if other else None

    ingest = [m for m in MODULES if _under(m, ("nsyscomm.ingest",)) and m != REGISTRY]
    _assert_none("read another format", _violations(ingest, other_formats))


def test_analyses_hang_does_not_load_jobs():
    """The gate's hang check reads Results (nsyscomm/gate/hang.py): the analysis loads nothing."""
    assert "nsyscomm.api" not in imports("nsyscomm.analyses.hang")


def test_the_checks_see_the_pipeline():
    """The checks above would pass on nothing: make sure they see the modules and their imports."""
    assert {
        "nsyscomm.api",
        "nsyscomm.discover",
        "nsyscomm.extract.pool",
        "nsyscomm.combine.job",
        "nsyscomm.analyses.result",
    } <= set(PIPELINE)
    assert "nsyscomm.extract.cache" in imports("nsyscomm.extract.pool")
    assert layer("nsyscomm.ingest.nsys.extract") == 6 and layer("nsyscomm.extract.readers") == 3
    assert {"nsyscomm.ingest.nsys", "nsyscomm.ingest.kineto", "nsyscomm.ingest.straggler"} <= set(FORMAT_PACKAGES)
    assert _format_of("nsyscomm.ingest.kineto.trace") == "nsyscomm.ingest.kineto" and layer(REGISTRY) == 6
    assert {"nsyscomm.ingest.nsys.extract", "nsyscomm.ingest.kineto.trace"} <= imports(REGISTRY)
    assert layer("nsyscomm.duck") is None and layer("nsyscomm.capture.wrapper") is None
    assert "nsyscomm.views.json_out" in VIEWS and _sql_uses("nsyscomm.analyses.result")
    assert "duckdb" in imports("nsyscomm.duck")
    assert _cycle_through("a", {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle_through("a", {"a": {"b"}, "b": set()}) is None
    assert len(PIPELINE) > 50 and len(VIEWS) > 5
    assert _violations(["x", "y"], lambda m: "bad" if m == "y" else None) == ["y: bad"]
    assert _violations(["y"], lambda m: "bad", {"y": "known"}) == []
