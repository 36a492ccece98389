"""Mutation audit: small bugs put into the factor, gate and what-if code one at a time, each run
against the tests of its area; a mutant that no test kills is a rule the suite does not check.

    pip install 'mutmut<3' whatthepatch
    python benchmarks/mutation_audit.py [busbw|verdict|whatif|whatif_check|invariants ...] [--out FILE]

It runs mutmut 2 (mutmut 3 mutates function bodies only, so a module-level table such as the
bus-bandwidth factors would go unchecked) in a copy of the working tree, never in the checkout,
with PYTHONPATH on that copy. Each target names the functions it mutates (all of a small file,
else the functions that hold the rules) and the test files that check them, so a run stays
within minutes on a small machine. It is slow (one pytest per mutant): not part of CI. The
surviving mutants it prints are recorded in docs/testing.md.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (file, functions to mutate (None: the whole file), pytest arguments)
TARGETS: dict[str, tuple[str, tuple[str, ...] | None, tuple[str, ...]]] = {
    "busbw": ("nsyscomm/busbw.py", None, ("tests/analyses/test_busbw.py",)),
    "verdict": (
        "nsyscomm/gate/verdict.py",
        ("compare_values", "fails", "margin"),
        (
            "tests/gate/test_gate.py",
            "-k",
            "not passes_against_itself and not gate_sources_load and not baseline_command",
        ),
    ),
    "whatif": (
        "nsyscomm/analyses/whatif.py",
        ("scenarios",),
        (
            "tests/analyses/test_whatif_rules.py",
            "tests/analyses/test_whatif_truth.py",
            "tests/analyses/test_whatif.py",
            "tests/analyses/test_whatif_async.py",
        ),
    ),
    "whatif_check": (
        "nsyscomm/analyses/whatif_check.py",
        None,
        ("tests/analyses/test_whatif_rules.py", "tests/analyses/test_whatif_truth.py"),
    ),
    "invariants": ("nsyscomm/analyses/invariants.py", None, ("tests/analyses/test_invariants.py",)),
}


def _mutmut() -> str:
    exe = os.environ.get("MUTMUT") or shutil.which("mutmut")
    if not exe:
        sys.exit("mutation_audit: mutmut not found; install it with: pip install 'mutmut<3' whatthepatch")
    out = subprocess.run([exe, "version"], capture_output=True, text=True)
    if not out.stdout.startswith("mutmut version 2."):
        sys.exit(
            f"mutation_audit: {exe} is not mutmut 2 ({out.stdout.strip() or out.stderr.strip()}); "
            "install it with: pip install 'mutmut<3' whatthepatch (or set MUTMUT to its path)"
        )
    return exe


def _copy_tree(dst: Path) -> None:
    """The checkout's files (tracked and untracked, not ignored) and its built C extensions."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    files += [str(p.relative_to(ROOT)) for p in (ROOT / "nsyscomm").rglob("*.so")]
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _patch(path: str, functions: tuple[str, ...] | None, root: Path) -> str:
    """A diff that marks the named functions' lines as added: mutmut --use-patch-file then mutates
    those lines only."""
    lines = (root / path).read_text().splitlines()
    spans = [(1, len(lines))]
    if functions is not None:
        spans = [
            (n.lineno, n.end_lineno or n.lineno)
            for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in functions
        ]
    out = [f"--- a/{path}", f"+++ b/{path}"]
    for a, b in sorted(spans):
        out.append(f"@@ -0,0 +{a},{b - a + 1} @@")
        out += ["+" + line for line in lines[a - 1 : b]]
    return "\n".join(out) + "\n"


def audit(name: str, exe: str, work: Path, minutes: float) -> str:
    path, functions, tests = TARGETS[name]
    tree = work / name
    tree.mkdir()
    _copy_tree(tree)
    (tree / "audit.patch").write_text(_patch(path, functions, tree))
    runner = " ".join([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *map(_quote, tests)])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [exe, "run", "--paths-to-mutate", path, "--runner", runner, "--use-patch-file", "audit.patch"]
    proc = subprocess.Popen(
        [*cmd, "--simple-output", "--no-progress"], cwd=tree, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        proc.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:  # what was tested so far is reported; the rest is counted
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
    results = subprocess.run([exe, "results"], cwd=tree, env=env, capture_output=True, text=True).stdout
    ids = _survivor_ids(results)
    untested = len(_survivor_ids(results, ("Untested",)))
    report = [f"## {name}: {path}", "", f"runner: `{runner.replace(sys.executable, 'python')}`", ""]
    report += [f"surviving mutants: {len(ids)}; not tested within {minutes} min: {untested}", ""]
    for i in ids:
        diff = subprocess.run([exe, "show", str(i)], cwd=tree, env=env, capture_output=True, text=True).stdout
        report += ["```diff", diff.strip(), "```", ""]
    return "\n".join(report)


def _quote(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


def _survivor_ids(results: str, kinds: tuple[str, ...] = ("Survived", "Suspicious")) -> list[int]:
    """mutmut 2's `results` lists ids under 'Survived' (or another kind's) headings as ranges."""
    ids: list[int] = []
    section = ""
    for line in results.splitlines():
        if line.startswith(("Survived", "Suspicious", "Timed out", "Killed", "Untested", "Skipped")):
            section = line
            continue
        if section.startswith(kinds) and line.strip() and line.strip()[0].isdigit():
            for part in line.replace(" ", "").split(","):
                a, _, b = part.partition("-")
                ids += range(int(a), int(b or a) + 1)
    return ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help=f"some of {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--out", type=Path, help="write the report here too")
    ap.add_argument("--minutes", type=float, default=60.0, help="time for each target (default 60)")
    args = ap.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target {', '.join(unknown)}; choose from {', '.join(TARGETS)}")
    exe = _mutmut()
    with tempfile.TemporaryDirectory(prefix="nsyscomm-mutation-") as tmp:
        text = "\n".join(audit(name, exe, Path(tmp), args.minutes) for name in args.targets or TARGETS)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
