"""Every file the package reads or writes as text names its encoding: under the C locale
(LC_ALL=C, PYTHONUTF8=0) Python's default is ASCII, and the SQL files, assets and JSON hold
characters past it. Checked on the source with ast: open(), Path.read_text() and write_text()
in text mode without encoding= (nsyscomm.commands.outputs.write_text writes UTF-8 itself)."""

from __future__ import annotations

import ast

from tests.codebase.test_layering import MODULES


def _mode(call: ast.Call) -> str:
    args = call.args[1:2] + [k.value for k in call.keywords if k.arg == "mode"]
    return args[0].value if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) else "r"


def _without_encoding(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
            continue
        f = node.func
        ours = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "outputs"
        if isinstance(f, ast.Attribute) and f.attr in ("read_text", "write_text") and not ours:
            lines.append(node.lineno)
        elif isinstance(f, ast.Name) and f.id == "open" and "b" not in _mode(node):
            lines.append(node.lineno)
    return lines


def test_text_files_name_their_encoding():
    bad = {
        name: lines
        for name, path in MODULES.items()
        if not name.startswith("nsyscomm.synth") and (lines := _without_encoding(ast.parse(path.read_text())))
    }
    assert not bad, bad
