"""The README's and docs/*.md's nsyscomm command lines, run as written, and their output blocks.

    python scripts/readme_blocks.py              # list every command line and output block found
    python scripts/readme_blocks.py --check      # run the output blocks' commands; exit 1 when one is stale
    python scripts/readme_blocks.py --update     # write what they print now into the blocks

tests/cli/test_readme.py runs every command line (the CI examples on a real 2-rank gloo job under
nsys) and compares the output blocks; when outputs changed on purpose, --update refreshes the
blocks. What the markdown says to this script, in HTML comments (invisible when rendered):

    <!-- output: nsyscomm summarize sample_reports/synthetic_ddp_4rank.sqlite -->
    ```                     <- the next code block is what that command prints on stdout
    <!-- not run: REASON -->
                            <- the next code block's command lines are not run (GPUs, a cluster)

Every other command line of a code block (fenced or indented; in YAML, a `run:` or `- ` item)
that calls an nsyscomm command is run, in a folder laid out by `sandbox()`: the bundled samples,
../shared (when present), and examples/ (the example job the Quick start and CI examples run).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBCOMMANDS = ("run", "summarize", "gate", "baseline", "trace", "report", "export")
_COMMAND = re.compile(r"(?:^|&&\s*|;\s*)(nsyscomm\s+(?:" + "|".join(SUBCOMMANDS) + r")\b.*)$|^(nsyscomm)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(output|not run):\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)")
_NOT_SHELL = {"python", "py", "toml", "json", "sql", "mermaid", "text", "console-output"}
STALE = "run `python scripts/readme_blocks.py --update` to refresh the shown output"


@dataclass
class Command:
    doc: str  # path relative to ROOT
    line: int  # 1-based line of the command (its first line, for a continued one)
    text: str  # the command as a shell runs it
    skip: str = ""  # why it is not run ("" : it is)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class OutputBlock:
    doc: str
    line: int  # 1-based line of the block's first content line
    end: int  # 1-based line of its closing fence
    command: str
    shown: str  # the block's text

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _blocks(lines: list[str]):
    """(kind, info, first, last, marker) per code block: kind 'fenced' or 'indented'; first/last
    0-based content lines (last exclusive); marker (kind, text) of the comment before it."""
    i, n = 0, len(lines)
    pending: tuple[str, str] | None = None
    prev_blank = True
    while i < n:
        line = lines[i]
        m = _MARKER.match(line)
        if m:
            pending = (m.group(1), m.group(2))
            i += 1
            prev_blank = True
            continue
        f = _FENCE.match(line)
        if f:
            fence = f.group(2)
            j = i + 1
            while j < n and not lines[j].strip().startswith(fence):
                j += 1
            yield "fenced", f.group(3).lower(), i + 1, j, pending
            pending, i, prev_blank = None, j + 1, False
            continue
        if prev_blank and line.startswith("    ") and line.strip():
            j = i
            while j < n and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            yield "indented", "", i, j, pending
            pending, i, prev_blank = None, j, False
            continue
        if line.strip():
            if not line.lstrip().startswith("<!--"):
                pending = None
            prev_blank = False
        else:
            prev_blank = True
        i += 1


def _command_of(line: str) -> str | None:
    s = line.strip()
    for prefix in ("- run:", "run:", "- "):
        if s.startswith(prefix):
            s = s[len(prefix) :].strip()
            break
    m = _COMMAND.search(s)
    if not m:
        return None
    return m.group(1) or m.group(2)


def scan(root: Path = ROOT) -> tuple[list[Command], list[OutputBlock]]:
    commands: list[Command] = []
    outputs: list[OutputBlock] = []
    for path in documents(root):
        rel = str(path.relative_to(root))
        lines = path.read_text(encoding="utf-8").splitlines()
        for kind, info, first, last, marker in _blocks(lines):
            if marker and marker[0] == "output":
                body = lines[first:last]
                if kind == "indented":
                    body = [ln[4:] for ln in body]
                outputs.append(OutputBlock(rel, first + 1, last + 1, marker[1], "\n".join(body)))
                continue
            if info in _NOT_SHELL:
                continue
            skip = marker[1] if marker and marker[0] == "not run" else ""
            k = first
            while k < last:
                start, text = k, lines[k]
                while text.rstrip().endswith("\\") and k + 1 < last:  # a continued command
                    k += 1
                    text = text.rstrip()[:-1] + " " + lines[k].strip()
                k += 1
                cmd = _command_of(text)
                if cmd:
                    commands.append(Command(rel, start + 1, cmd, skip))
    return commands, outputs


# ---------------------------------------------------------------------------------- running


def sandbox(base: Path, root: Path = ROOT) -> Path:
    """A folder to run the documents' commands in (returned: the working directory): the bundled
    samples, ../shared as this checkout sees it, examples/, an `nsyscomm` that runs this checkout
    first on PATH (bin/), and a git repository with one commit (for `git rev-parse HEAD`) where
    git is installed."""
    work = base / "work"
    (base / "bin").mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / "sample_reports").symlink_to(root / "sample_reports")
    if (root.parent / "shared").exists():
        (base / "shared").symlink_to(root.parent / "shared")
    (work / "examples").symlink_to(root / "examples")
    shim = base / "bin" / "nsyscomm"
    shim.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\nfrom nsyscomm.cli import entry\nentry()\n"
    )
    shim.chmod(0o755)
    if shutil.which("git"):
        env = environment(base)
        subprocess.run(["git", "init", "-q"], cwd=work, env=env, check=True)
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "readme"], cwd=work, env=env, check=True)
    return work


def environment(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{base / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("GITHUB_STEP_SUMMARY", None)  # the gate appends to it when set: not from a test
    env.update(
        GIT_AUTHOR_NAME="readme",
        GIT_AUTHOR_EMAIL="readme@localhost",
        GIT_COMMITTER_NAME="readme",
        GIT_COMMITTER_EMAIL="readme@localhost",
        NSYSCOMM_CACHE_DIR=str(base / "cache"),  # the extract cache: none of the user's
    )
    return env


def missing_input(cmd: str, work: Path) -> str:
    """A reason to skip cmd: a path under ../shared it names is absent (real data, not in CI)."""
    for word in shlex.split(cmd, comments=True):
        if word.startswith("../shared") and not (work / word).exists():
            return f"{word} is absent (the real reports of ../shared)"
    return ""


def run(cmd: str, work: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd],
        cwd=work,
        env=environment(work.parent),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def normalize(text: str) -> str:
    """Output as a block shows it: no trailing spaces, no blank lines at either end."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip("\n")


def update(blocks: list[OutputBlock], new: dict[str, str], root: Path = ROOT) -> list[str]:
    """Write new[block.id] into each block whose text differs; the changed documents."""
    changed = []
    for doc in sorted({b.doc for b in blocks}):
        path = root / doc
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        for b in sorted((b for b in blocks if b.doc == doc and b.id in new), key=lambda b: -b.line):
            if normalize(b.shown) == new[b.id]:
                continue
            lines[b.line - 1 : b.end - 1] = [ln + "\n" for ln in new[b.id].splitlines()]
        text = "".join(lines)
        if text != path.read_text(encoding="utf-8"):
            path.write_text(text, encoding="utf-8")
            changed.append(doc)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a shown output is stale")
    mode.add_argument("--update", action="store_true", help="write the commands' output into the blocks")
    args = ap.parse_args(argv)
    commands, blocks = scan()
    if not (args.check or args.update):
        for c in commands:
            print(f"{c.id}: {c.text}" + (f"    [not run: {c.skip}]" if c.skip else ""))
        for b in blocks:
            print(f"{b.id}: output of {b.command}")
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        work = sandbox(Path(tmp))
        new, stale = {}, []
        for b in blocks:
            why = missing_input(b.command, work)
            if why:
                print(f"{b.id}: skipped: {why}", file=sys.stderr)
                continue
            r = run(b.command, work)
            if r.returncode != 0:
                print(f"{b.id}: {b.command} exited {r.returncode}: {r.stderr.strip()[-500:]}", file=sys.stderr)
                return 2
            new[b.id] = normalize(r.stdout)
            if new[b.id] != normalize(b.shown):
                stale.append(b.id)
    if args.update:
        for doc in update(blocks, new):
            print(f"updated {doc}")
        return 0
    for s in stale:
        print(f"{s}: stale; {STALE}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
