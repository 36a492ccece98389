"""Every NSYSCOMM_* variable the code names is declared in nsyscomm/settings.py and documented in
docs/configuration.md (with its declared default), and nothing declared or documented is stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nsyscomm import settings
from tests.conftest import ROOT

NAME = re.compile(r"\bNSYSCOMM_[A-Z0-9_]+\b")
DOC = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def _names(folders: tuple[str, ...], suffixes: tuple[str, ...]) -> set[str]:
    found = set()
    for folder in folders:
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in suffixes and p.is_file() and p.name != "settings.py":
                found |= set(NAME.findall(p.read_text(encoding="utf-8", errors="replace")))
    return found


def _read_through_accessors() -> set[str]:
    """Variables read by a call to their accessor (settings.nsys() reads NSYSCOMM_NSYS)."""
    tree = ast.parse((ROOT / "nsyscomm" / "settings.py").read_text(encoding="utf-8"))
    reads = {
        f.name: {c.value for c in ast.walk(f) if isinstance(c, ast.Constant) and c.value in settings.BY_NAME}
        for f in tree.body
        if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")
    }
    code = "\n".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "nsyscomm").rglob("*.py") if p.name != "settings.py"
    )
    return {v for name, vs in reads.items() if re.search(rf"\bsettings\.{name}\(", code) for v in vs}


CODE = _names(("nsyscomm", "sql"), (".py", ".c", ".sql")) | _read_through_accessors()
TESTS = _names(("tests",), (".py",)) - CODE


def _documented(name: str) -> str | None:
    return next((line for line in DOC.splitlines() if line.startswith(f"| `{name}` |")), None)


def test_the_code_reads_some_variables():  # the grep itself works
    assert {"NSYSCOMM_NSYS", "NSYSCOMM_CAPTURE_STEPS", "NSYSCOMM_REPLAY_PY", "NSYSCOMM_RING_PY"} <= CODE


@pytest.mark.parametrize("name", sorted(CODE))
def test_each_variable_of_the_code_is_declared_and_documented(name):
    assert name in settings.BY_NAME, f"{name}: declare it in nsyscomm/settings.py (VARIABLES)"
    row = _documented(name)
    assert row, f"{name}: add a row for it to docs/configuration.md"
    assert settings.BY_NAME[name].default in row, f"{name}: docs/configuration.md gives another default"


def test_nothing_declared_or_documented_is_stale():
    declared = set(settings.BY_NAME)
    assert declared - CODE == set(), "declared in nsyscomm/settings.py but read nowhere"
    documented = set(re.findall(r"^\| `(NSYSCOMM_[A-Z0-9_]+)` \|", DOC, re.M))
    assert documented - CODE - TESTS == set(), "documented but read nowhere"
    assert TESTS - documented == set(), "read by the tests but not in docs/configuration.md"


def test_each_declared_kind_is_one_of_three():
    assert {v.kind for v in settings.VARIABLES} <= {settings.USER, settings.CHANNEL, settings.TEST}


def test_accessors_read_the_environment_when_called(monkeypatch):
    monkeypatch.setenv("NSYSCOMM_FR_MAX_GROUP", "12")
    assert settings.fr_max_group() == 12
    monkeypatch.setenv("NSYSCOMM_FR_MAX_GROUP", "-3")
    assert settings.fr_max_group() is None
    monkeypatch.setenv("NSYSCOMM_CAPTURE_WARN_MB", "0.5")
    assert settings.capture_warn_mb() == 0.5
    monkeypatch.delenv("NSYSCOMM_ANNOTATE", raising=False)
    assert settings.annotate()
    monkeypatch.setenv("NSYSCOMM_ANNOTATE", "0")
    assert not settings.annotate()
    monkeypatch.setenv("NSYSCOMM_TORCH_ACTIVITIES", "CPU")
    assert settings.torch_activities() == {"cpu"}


# Modules that still read their NSYSCOMM_* variables from os.environ themselves: a module leaves
# this list in the commit that moves its reads to nsyscomm/settings.py.
# The job's startup hook stays: it must import without nsyscomm.
READS_OF_THEIR_OWN = {
    "nsyscomm/capture/_hook/sitecustomize.py",
}


def _own_reads(path: Path) -> list[str]:
    """Where the module reads the environment for a variable that is, or may be, nsyscomm's: a
    read by a name it cannot be told (a function's argument) counts, one of a standard variable
    (XDG_CACHE_HOME, RANK) does not. Writes (the launcher telling its job) are not reads."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def environ(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            or (isinstance(node, ast.Name) and node.id == "environ")
        )

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (f.attr == "get" and environ(f.value)) or (f.attr == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and environ(node.value):
            key = node.slice
        if key is None:
            continue
        name = key.value if isinstance(key, ast.Constant) else consts.get(key.id) if isinstance(key, ast.Name) else None
        if not isinstance(name, str) or name.startswith("NSYSCOMM_"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads {name or ast.unparse(key)}")
    return found


def test_the_variables_are_read_through_settings_only():
    """A module reading NSYSCOMM_* from os.environ bypasses the declared default and parsing."""
    modules = sorted((ROOT / "nsyscomm").rglob("*.py"))
    own = {str(p.relative_to(ROOT)): _own_reads(p) for p in modules if p.name != "settings.py"}
    bypass = [r for m, rs in own.items() if m not in READS_OF_THEIR_OWN for r in rs]
    assert not bypass, "read these through nsyscomm/settings.py:\n" + "\n".join(bypass)
    moved = sorted(m for m in READS_OF_THEIR_OWN if not own.get(m))
    assert not moved, f"these read through nsyscomm/settings.py now: remove them from READS_OF_THEIR_OWN: {moved}"
