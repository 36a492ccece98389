"""Every NSYSCOMM_* variable the code names is declared in nsyscomm/settings.py and documented in
docs/configuration.md (with its declared default), and nothing declared or documented is stale."""

from __future__ import annotations

import ast
import re

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


def _environment_reads(tree: ast.AST) -> list[ast.expr]:
    """The keys of os.environ.get(K), os.getenv(K) and os.environ[K] reads in a module."""
    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            f = node.func
            environ_get = f.attr == "get" and ast.unparse(f.value) == "os.environ"
            if environ_get or ast.unparse(f) == "os.getenv":
                keys.append(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value) == "os.environ":
                keys.append(node.slice)
    return keys


def test_capture_reads_nsyscomm_variables_through_settings():
    """The capture side reads its NSYSCOMM_* variables through nsyscomm.settings, which says what
    each one is; only the startup hook, which must import without nsyscomm, reads its own. What is
    left are the launcher's and torchrun's standard variables (RANK, LOCAL_RANK, TMPDIR), named
    by literal so that this check can see them."""
    capture = ROOT / "nsyscomm" / "capture"
    found = {}
    for p in sorted(capture.glob("*.py")):
        for key in _environment_reads(ast.parse(p.read_text(encoding="utf-8"))):
            literal = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if not literal or key.value.startswith("NSYSCOMM_"):
                found.setdefault(p.name, []).append(ast.unparse(key))
    assert found == {}, "read these through nsyscomm.settings (declare them there first)"
