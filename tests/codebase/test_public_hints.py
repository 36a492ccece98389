"""Type hints on every public function (CONTRIBUTING.md, "Style"), read from the source with ast:
each function or method whose name does not start with ``_`` (at module level or in a public
class) annotates every parameter but self/cls, *args and **kwargs included, and its return."""

from __future__ import annotations

import ast
from pathlib import Path

import nsyscomm

PKG = Path(nsyscomm.__file__).resolve().parent
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _missing(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """What fn leaves unannotated: its parameters' names, and 'return'."""
    a = fn.args
    params = [p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
    params += [p for p in (a.vararg, a.kwarg) if p is not None]
    out = [p.arg for p in params if p.annotation is None]
    return out + (["return"] if fn.returns is None else [])


def _public_functions(body: list[ast.stmt], owner: str = ""):
    for node in body:
        if isinstance(node, FUNCTIONS) and not node.name.startswith("_"):
            yield f"{owner}{node.name}", node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _public_functions(node.body, f"{owner}{node.name}.")


def unannotated(path: Path, root: Path = PKG.parent) -> list[str]:
    """'file:line name: missing' for each public function of one module that lacks a hint."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(root)
    return [
        f"{rel}:{fn.lineno} {name}: {', '.join(miss)}"
        for name, fn in _public_functions(tree.body)
        if (miss := _missing(fn))
    ]


def test_public_functions_have_type_hints():
    offenders = [line for path in sorted(PKG.rglob("*.py")) for line in unannotated(path)]
    assert not offenders, f"{len(offenders)} public function(s) without full type hints:\n" + "\n".join(offenders)


def test_the_check_sees_what_it_should(tmp_path):
    """The check above would pass on nothing: it must see the package and flag each kind of gap."""
    assert len(list(PKG.rglob("*.py"))) > 50
    src = tmp_path / "m.py"
    src.write_text(
        "def ok(a: int, *b: int, c: int = 0, **d: int) -> None: ...\n"
        "def no_return(a: int): ...\n"
        "def no_arg(a, b: int) -> int: ...\n"
        "def no_star(*a, **k) -> None: ...\n"
        "def _private(a): ...\n"
        "class C:\n"
        "    def method(self, x) -> None: ...\n"
        "    @classmethod\n"
        "    def make(cls) -> C: ...\n"
        "    def _hidden(self, x): ...\n"
        "class _Hidden:\n"
        "    def method(self, x): ...\n"
        "def outer() -> None:\n"
        "    def inner(x): ...\n"
    )
    found = {line.split(" ", 1)[1] for line in unannotated(src, root=tmp_path)}
    assert found == {"no_return: return", "no_arg: a", "no_star: a, k", "C.method: x"}
