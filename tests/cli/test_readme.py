"""The README and docs/*.md run as written: every nsyscomm command line of their code
blocks is run, and every output block shows what its command prints.

Lines found and run by scripts/readme_blocks.py (its docstring: the markers). The commands run
in one folder, in document order (README first), once per test session: the `nsyscomm run` of
the example job (examples/train.py, 2 gloo ranks) under the real nsys, twice (the Quick start's
run/, which is also the CI example's baseline, then CI's comm/), and everything else after them.
The folders the docs name for "a run" (run/, new_run/, run1/ ...) are those two runs. A command marked
`<!-- not run: REASON -->` is not run; any other that fails fails its test. When outputs
change on purpose: python scripts/readme_blocks.py --update.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLES

_spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "scripts" / "readme_blocks.py")
assert _spec is not None and _spec.loader is not None
rb = importlib.util.module_from_spec(_spec)
sys.modules["readme_blocks"] = rb  # dataclasses look their module up
_spec.loader.exec_module(rb)

COMMANDS, OUTPUTS = rb.scan()
RUNS = [c for c in COMMANDS if not c.skip]
# the docs' names for a run's folder and for reports, in the folder the commands run in
ALIASES = {
    "new_run": "comm",
    "run1": "run",
    "run2": "comm",
    "run3": "run",
    "run4": "comm",
}
FILES = {"report.sqlite": "synthetic_ddp_4rank.sqlite", "big.sqlite": "synthetic_fsdp_8rank.sqlite"}
_NEEDS_RUN = re.compile(r"(?:^|\s)(?:run\d?|new_run|comm)/|ci/comm-baseline\.json")
# a regression the gate must catch on a one-run baseline: rank 1 sleeps 250 ms before every step's
# backward (its all_reduce) (the CI example's job otherwise), 5 s in all: more than the single-run margin's 25%
# of the baseline run's time even when a loaded machine stretches that run several times
SLOW_RUN = (
    "nsyscomm run --output slow --no-summary -- torchrun --standalone --nproc-per-node=2 "
    "examples/train.py --steps 20 --seed 0 --sleep-ms 250"
)


def _capture_missing() -> str:
    if shutil.which("nsys") is None:
        return "nsys (Nsight Systems) is not on PATH; CI installs Debian's nsight-systems"
    if shutil.which("torchrun") is None:
        return "torchrun is not on PATH (the [torch] extra)"
    try:
        from importlib.metadata import version

        if tuple(int(x) for x in version("nvtx").split(".")[:3]) > (0, 2, 11):
            return "nsys 2022.4 records NVTX ranges only from nvtx <= 0.2.11"
    except Exception:
        return "nvtx is not installed"
    return ""


@dataclass
class Executed:
    work: Path
    results: dict[str, subprocess.CompletedProcess | str] = field(default_factory=dict)  # str: why skipped


def _is_capture(text: str) -> bool:
    return text.startswith("nsyscomm run ")


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Executed:
    base = tmp_path_factory.mktemp("readme")
    ex = Executed(rb.sandbox(base))
    for name, sample in FILES.items():
        shutil.copy(SAMPLES / sample, ex.work / name)
    missing = _capture_missing()
    done: dict[str, subprocess.CompletedProcess | str] = {}
    captures = [c for c in RUNS if _is_capture(c.text)]
    for c in captures:  # the jobs first, each distinct one once (the docs repeat the CI example)
        if c.text not in done:
            done[c.text] = f"needs a real run: {missing}" if missing else _capture(c.text, ex.work)
        ex.results[c.id] = done[c.text]
    _link_runs(ex.work)
    for c in RUNS:
        if c.id in ex.results:
            continue
        twin = next((d for d in RUNS if d.doc == c.doc and d.text == c.text and d.id in ex.results), None)
        if twin is not None:  # GitHub's and GitLab's example of one document: the same line, run once
            ex.results[c.id] = ex.results[twin.id]
        elif missing and _NEEDS_RUN.search(c.text):
            ex.results[c.id] = f"needs a real run: {missing}"
        else:
            ex.results[c.id] = rb.missing_input(c.text, ex.work) or rb.run(c.text, ex.work)
    ex.results["slow"] = f"needs a real run: {missing}" if missing else _capture(SLOW_RUN, ex.work)
    return ex


# torch's gloo now and then aborts a rank as the process group is torn down, after the job's work
# (nsyscomm says so and keeps the report; its status is the job's): a README command is run again
# then, in a fresh output folder, so that the docs' checks see a whole run
TEARDOWN_ABORT = "terminate called without an active exception"
CAPTURE_TRIES = 3


def _capture(text: str, work: Path) -> subprocess.CompletedProcess:
    out = re.search(r"--output\s+(\S+)", text)
    for _ in range(CAPTURE_TRIES - 1):
        r = rb.run(text, work)
        if r.returncode == 0 or TEARDOWN_ABORT not in r.stderr:
            return r
        if out:
            shutil.rmtree(work / out.group(1), ignore_errors=True)
    return rb.run(text, work)


def _link_runs(work: Path) -> None:
    for alias, target in ALIASES.items():
        if (work / target).is_dir() and not (work / alias).exists():
            (work / alias).symlink_to(target)


def _result(ex: Executed, key: str) -> subprocess.CompletedProcess:
    r = ex.results[key]
    if isinstance(r, str):
        pytest.skip(r)
    return r


# ------------------------------------------------------------------------------ what is found


def test_the_documents_commands_are_found():
    """The extractor sees the set-up line, the CI examples (YAML) and the marked GPU lines."""
    texts = {c.text for c in COMMANDS}
    assert "nsyscomm summarize" in texts  # `pip install . && nsyscomm summarize`
    ci = [c for c in RUNS if c.text.startswith("nsyscomm gate --baseline ci/comm-baseline.json comm/")]
    # README: GitHub's; docs/gate.md: GitHub's and GitLab's
    assert {c.doc for c in ci} == {"README.md", "docs/gate.md"} and len(ci) == 3
    assert any(c.skip and "torchrun --nproc-per-node 8" in c.text for c in COMMANDS)
    assert any(b.command == "nsyscomm summarize sample_reports/synthetic_ddp_4rank.sqlite" for b in OUTPUTS)


def test_the_set_up_is_two_commands():
    """The README's set-up: one command installs and runs the main job, one the tests."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set up (fresh machine)", 1)[1].split("\n## ", 1)[0]
    code = [ln.strip() for ln in section.splitlines() if ln.startswith("    ") and ln.strip()]
    assert code == ["pip install . && nsyscomm summarize", "bash .ci/run"]


# ------------------------------------------------------------------------------ what they do


@pytest.mark.parametrize("cmd", RUNS, ids=[c.id for c in RUNS])
def test_command_runs_as_written(executed, cmd):
    r = _result(executed, cmd.id)
    assert r.returncode == 0, (
        f"{cmd.id}: `{cmd.text}` exited {r.returncode}:\n{r.stderr[-3000:]}\n{r.stdout[-1000:]}\n"
        f"(a command that cannot run in CI is marked <!-- not run: REASON --> before its block)"
    )


@pytest.mark.parametrize("block", OUTPUTS, ids=[b.id for b in OUTPUTS])
def test_shown_output_is_what_the_command_prints(executed, block):
    why = rb.missing_input(block.command, executed.work)
    if why:
        pytest.skip(why)
    r = rb.run(block.command, executed.work)
    assert r.returncode == 0, r.stderr[-2000:]
    now, shown = rb.normalize(r.stdout), rb.normalize(block.shown)
    diff = "\n".join(
        list(difflib.unified_diff(shown.splitlines(), now.splitlines(), "shown", "printed", lineterm=""))[:60]
    )
    assert now == shown, f"{block.id}: the block shown is stale; {rb.STALE}\n{diff}"


# ------------------------------------------------------------- the CI example on a real job


def _ci(ex: Executed, startswith: str) -> subprocess.CompletedProcess:
    c = next(c for c in RUNS if c.doc == "README.md" and c.text.startswith(startswith))
    return _result(ex, c.id)


def test_the_ci_gate_passes_identical_code_with_a_note(executed):
    """The gate's first day: the baseline from one run, the gate on a second run of the same code."""
    r = _ci(executed, "nsyscomm gate --baseline ci/comm-baseline.json comm/")
    assert r.returncode == 0 and r.stdout.startswith("PASS"), r.stdout
    assert "one baseline run: no noise band is known" in r.stdout
    assert (executed.work / "comm" / "gate.xml").is_file()


def test_the_gate_fails_a_real_straggler(executed):
    """...and the same job with rank 1 sleeping 250 ms before each step's all_reduce fails."""
    slow = _result(executed, "slow")
    assert slow.returncode == 0, slow.stderr[-3000:]
    r = rb.run("nsyscomm gate --baseline run/ slow/", executed.work)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("FAIL") and "wait time" in r.stdout and "none (1 run)" in r.stdout


def test_a_run_shows_no_noise(executed):
    """A first run's output: nsys's importer lines are gone from `nsyscomm run`; a CPU job's summary
    has no warning about GPU kernels, no line broken in two and none ending in spaces."""
    run = _ci(executed, "nsyscomm run --output comm ")
    assert "Importer error status" not in run.stderr and "skipping importation" not in run.stderr
    # nor nsys's lines naming the .qdstrm it wrote, gone once imported into the .nsys-rep
    assert ".qdstrm" not in run.stdout + run.stderr and "Generated:" not in run.stdout + run.stderr
    assert "nsyscomm: report(s) in" in run.stderr
    r = rb.run("nsyscomm summarize comm/ | cat", executed.work)
    assert r.returncode == 0
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines and [ln for ln in lines if ln != ln.rstrip()] == []
    # its row (a line under it may name the steps it leaves out)
    what_if = [ln for ln in lines if ln.lstrip().startswith("no_straggler ") and " -> " in ln]
    assert what_if and all("top:" in ln for ln in what_if)  # its list of keys is not cut into a second line


# ------------------------------------------------------ the example job and its .nsys-rep


def test_the_example_job_is_what_the_summary_counts(executed):
    """The Quick start's run of examples/train.py: DDP's one gradient bucket is one all_reduce per
    step and rank, of the model's parameters in float32 (the program's own shapes)."""
    run = _ci(executed, "nsyscomm run --output run ")
    assert "step 20/20 loss" in run.stdout
    r = rb.run("nsyscomm summarize run/ --format json", executed.work)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    params = 256 * 256 + 256  # the Linear layer of examples/train.py
    rows = [x for x in doc["summary"] if x["op"] == "all_reduce"]
    assert [(x["bytes"], x["calls"]) for x in rows] == [(4 * params, 2 * 20)]


def test_a_run_s_nsys_rep_reads_as_its_export(executed):
    """`summarize run/report.nsys-rep` (the README's line): nsys exports it into the cache, and the
    result is that of the run's own export of the same report; nothing is written beside it. The
    run folder's HTML report has no warning: its .nsys-rep beside the export read is no news."""
    _ci(executed, "nsyscomm run --output run ")
    run = executed.work / "run"
    before = sorted(p.name for p in run.iterdir())
    got = rb.run("nsyscomm summarize run/report.nsys-rep --format json", executed.work)
    want = rb.run("nsyscomm summarize run/report.arrow --format json", executed.work)
    assert got.returncode == 0 and want.returncode == 0, got.stderr + want.stderr
    assert got.stdout.replace("report.nsys-rep", "REPORT") == want.stdout.replace("report.arrow", "REPORT")
    assert json.loads(got.stdout)["reports"] == ["report.nsys-rep"]
    assert sorted(p.name for p in run.iterdir()) == before
    assert list((executed.work.parent / "cache" / "exports").glob("*.arrow"))
    _result(executed, next(c.id for c in RUNS if c.text.startswith("nsyscomm report run/ -o report.html")))
    html = (executed.work / "report.html").read_text()
    assert "its export is read" in html and "<b>Warnings</b>" not in html
