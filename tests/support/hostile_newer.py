"""The hostile corpus of the newer formats, built by construction: what-if traces
(Parquet + meta YAML, tests/support/hostile_whatif.py) and Kineto traces (tests/support/hostile_kineto.py); a
format adds a module of its families to FAMILIES, each registering its cases with @case.

REGISTRY is a list of Case(family, name, build, expect, commands, heavy, env): build(folder) writes
the case's files into an empty folder and returns the inputs to give on the command line;
expect is ERROR (every command exits 2 with one line naming an input file) or OK (exit 0), from
how the case was built, never from nsyscomm's output. A heavy case (one built to exhaust memory
or time) runs in a child process of its own under a memory cap (RLIMIT_AS) and a time limit; the
others in two such processes; each command through click's CliRunner there.
tests/hostile/test_hostile_newer.py runs it in CI;
`python -m tests.support.hostile_newer` prints the totals the README quotes.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tests.conftest import ROOT
from tests.support.hostile_corpus import snapshot

ERROR, OK = "error", "ok"
ALL = ("summarize", "json", "report", "trace", "export")
READ = ("summarize", "json", "report", "trace")  # the commands that read a source only
MEMORY_CAP = 4 << 30  # address space of a heavy case's process (a normal start needs about 3 GB)
CASE_TIMEOUT_S = 150  # a heavy case's commands together; past it the case counts as a hang
LIGHT_TIMEOUT_S = 400  # half the light cases, in one process


class Case(NamedTuple):
    family: str
    name: str
    build: Callable[[Path], list[str]]
    expect: str = ERROR
    commands: tuple[str, ...] = ALL
    heavy: bool = False
    env: tuple[tuple[str, str], ...] = ()  # variables set for a heavy case's process


REGISTRY: list[Case] = []


def case(
    family: str,
    name: str,
    expect: str = ERROR,
    commands: tuple[str, ...] = ALL,
    heavy: bool = False,
    env: tuple[tuple[str, str], ...] = (),
):
    """Register the decorated builder as a case."""

    def add(fn: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        REGISTRY.append(Case(family, name, fn, expect, commands, heavy, env))
        return fn

    return add


FAMILIES = ("tests.support.hostile_whatif", "tests.support.hostile_kineto")  # modules of cases, registered on import


def load_families() -> list[Case]:
    """REGISTRY, every module of FAMILIES imported."""
    for m in FAMILIES:
        importlib.import_module(m)
    return REGISTRY


# ---------------------------------------------------------------------------- running it


def argv(command: str, inputs: list[str], out: Path) -> list[str]:
    return {
        "summarize": ["summarize", "--no-cache", *inputs],
        "json": ["summarize", "--no-cache", "--format", "json", *inputs],
        "report": ["report", "-o", str(out / "r.html"), *inputs],
        "trace": ["trace", "-o", str(out / "t.json"), *inputs],
        "export": ["export", "--format", "whatif", str(out / "export"), *inputs],
    }[command]


def run_case(c: Case, inputs: list[str], out: Path) -> dict:
    """Every command of the case in this process (click's CliRunner): what went wrong."""
    from click.testing import CliRunner

    from nsyscomm.cli import main

    out.mkdir(parents=True, exist_ok=True)
    watched = Path(inputs[0]).parent
    before = snapshot(watched)
    names = {p.name for p in watched.iterdir()}
    res: dict = {"case": c.name, "family": c.family, "runs": 0, "one_line_errors": 0, "failures": []}
    for cmd in c.commands:
        r = CliRunner().invoke(main, argv(cmd, inputs, out))
        res["runs"] += 1
        text = r.output
        if "Traceback" in text or "internal error" in text or (r.exception and not isinstance(r.exception, SystemExit)):
            res["failures"].append(f"{cmd}: internal error or traceback: {text[-300:]!r}")
            res["internal"] = res.get("internal", 0) + 1
        elif r.exit_code == 2:
            lines = [x for x in r.stderr.splitlines() if x.strip()]
            if len(lines) == 1 and lines[0].startswith("nsyscomm: error:") and any(n in lines[0] for n in names):
                res["one_line_errors"] += 1
            else:
                res["failures"].append(f"{cmd}: exit 2 without one line naming the file: {r.stderr[:300]!r}")
        want = 2 if c.expect == ERROR else 0
        if r.exit_code != want:
            res["failures"].append(f"{cmd}: exit {r.exit_code}, expected {want}: {r.output[-300:]!r}")
        after = snapshot(watched)
        if after != before:
            res["failures"].append(f"{cmd}: files beside the input changed")
            before = after
    return res


def peak_mb() -> int:
    """This process's peak resident memory in MB (VmHWM: of its own address space since exec;
    ru_maxrss would count the RSS of the parent it was forked from)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _child(names: list[str], folder: Path) -> None:
    """In a child process: the named cases (built under folder), one JSON line each as it ends."""
    by_name = {c.name: c for c in load_families()}
    for name in names:
        inputs = json.loads((folder / "args" / f"{name}.json").read_text())
        r = run_case(by_name[name], inputs, folder / "out" / name)
        r["peak_mb"] = peak_mb()
        print(json.dumps(r), flush=True)


def run_group(cases: list[Case], folder: Path, env: dict, timeout: float) -> list[dict]:
    """The cases, built under folder, in one child process under MEMORY_CAP and a time limit.
    A case that did not report is a hang (time ran out during it) or a failure (the process
    died: out of memory, a crash); the ones after it did not run."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    code = "import sys; from pathlib import Path; import tests.support.hostile_newer as H; H._child(sys.argv[2:], Path(sys.argv[1]))"
    names = [c.name for c in cases]
    log = folder / "out" / f"{names[0]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    timed_out = False
    with open(log, "w+") as so:
        p = subprocess.Popen(
            [sys.executable, "-c", code, str(folder), *names],
            stdout=so,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            preexec_fn=cap,
        )
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            timed_out = True
        so.seek(0)
        text = so.read()
    done = {}
    for line in text.splitlines():
        if line.startswith('{"case"'):
            r = json.loads(line)
            done[r["case"]] = r
    out = []
    first = True  # the first case that did not report is the one the process ended in
    for c in cases:
        if c.name in done:
            out.append(done[c.name])
            continue
        r = {"case": c.name, "family": c.family, "runs": 0}
        if first and timed_out:
            r["hang"] = True
        else:
            r["failures"] = [f"runner died (exit {p.returncode}): {text[-400:]!r}" if first else "not run"]
        out.append(r)
        first = False
    return out


TOTALS = ("cases", "command runs", "exit-2 one-liners", "internal errors", "hangs", "other failures")


def run_corpus(d: Path, families: tuple[str, ...] | None = None) -> tuple[dict, list[dict]]:
    """Build every case of REGISTRY (of these families) in folder d and run its commands, two
    child processes at a time, each under MEMORY_CAP: the light cases in two processes, each
    heavy case in its own (its peak memory its own). (totals, per case)."""
    from concurrent.futures import ThreadPoolExecutor

    env = {
        **os.environ,
        "NSYSCOMM_CACHE_DIR": str(d / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("NSYSCOMM_MEMORY_LIMIT", None)  # the default budget, unless a case sets one
    chosen = [c for c in load_families() if not families or c.family in families]
    for c in chosen:
        folder = d / "in" / c.name
        folder.mkdir(parents=True)
        (d / "args").mkdir(exist_ok=True)
        (d / "args" / f"{c.name}.json").write_text(json.dumps(c.build(folder)))
    light = [c for c in chosen if not c.heavy]
    groups = [(light[i::2], env, LIGHT_TIMEOUT_S) for i in range(2) if light[i::2]]
    groups += [([c], env | dict(c.env), CASE_TIMEOUT_S) for c in chosen if c.heavy]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda g: run_group(g[0], d, g[1], g[2]), groups))
    per = [r for rs in runs for r in rs]
    heavy = {c.name for c in chosen if c.heavy}
    totals: dict = dict.fromkeys(TOTALS, 0)
    totals["cases"] = len(per)
    for r in per:
        totals["command runs"] += r.get("runs", 0)
        totals["exit-2 one-liners"] += r.get("one_line_errors", 0)
        totals["internal errors"] += r.get("internal", 0)
        totals["hangs"] += bool(r.get("hang"))
        totals["other failures"] += len(r.get("failures", [])) - r.get("internal", 0)
    worst = max((r for r in per if r["case"] in heavy and "peak_mb" in r), key=lambda r: r["peak_mb"], default=None)
    totals["peak MB (worst heavy case)"] = f"{worst['peak_mb']} ({worst['case']})" if worst else "-"
    return totals, per


if __name__ == "__main__":  # python -m tests.support.hostile_newer: the totals the README quotes
    import tempfile

    from tests.support import hostile_newer as H

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        totals, per = H.run_corpus(Path(tmp))  # the module families register in, not __main__
    for r in per:
        if r.get("failures") or r.get("hang"):
            print(r["case"], r.get("failures"), "hang" if r.get("hang") else "")
        if "peak_mb" in r and any(c.heavy and c.name == r["case"] for c in H.REGISTRY):
            print(f"  {r['case']}: peak {r['peak_mb']} MB")
    print(", ".join(f"{k}: {v}" for k, v in totals.items()) + f" ({time.monotonic() - t0:.0f} s)")
