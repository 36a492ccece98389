"""The cost of profiling end to end: a scripted gloo job bare, under nsys alone, under nsyscomm run.

    python benchmarks/bench_capture.py [--ranks 2] [--calls 3000] [--bytes 4096] [--compute-ms 0]
                                       [--repeats 3] [--variants bare,nsys,nsys-light,run-sqlite,run-arrow,run-light]
                                       [--baseline DIR]

The job is benchmarks/gloo_job.py (CALLS all-reduces of BYTES per rank, a broadcast every 10th,
COMPUTE_MS of pure-Python spinning before each call). Variants, run in turn within each repeat so
that a shared machine's load falls on all of them alike:

  bare         the job itself (python -m torch.distributed.run ...)
  nsys         nsys profile with nsyscomm run's flags (--trace=nvtx,osrt -s none --cpuctxsw=none),
               no wrapper; then QdstrmImporter and both exports of its report, timed one by one
  nsys-light   the same with the light preset's --trace=nvtx
  nsys-wrapped nsys profile as `nsys`, the job given nsyscomm run's job environment (the wrapper's
               startup hook, the flight record): the wrapper under nsys without the launcher, so
               that nsys-wrapped / nsys is the wrapper's share and run-arrow / nsys-wrapped the
               launcher's
  run-sqlite   nsyscomm run (wrapper + nsys, default preset), --export sqlite, summary printed
  run-arrow    the same with --export arrow
  run-light    nsyscomm run --preset light --export arrow
  run-base     run-arrow with the nsyscomm of another tree (--baseline DIR: a checkout or `git archive`
               of an older commit, its C extensions copied in), alternated with this one's

Job times: the loop of the job (gloo_job.py --timing: from after init to the last call, the
slowest rank; wall and CPU), which leaves out torchrun's and the interpreters' start, and the
wall time of the bare job; of nsys profile (its own start and its writing of the
.qdstrm included); of nsyscomm run's job (its log's "job exited ... after S" line). Overheads as
ratios to the bare job: nsys's = nsys / bare; the wrapper's = run job / nsys job (same flags).
After the job, what the user waits for, from the application's exit (the job runs under
`sh -c 'JOB; date > STAMP'`: the stamp is written as the job's last process has exited):

  finish  nsys's own work after the application: from its exit to nsys profile's (under nsyscomm
          run, to its log's "job exited" line, written as nsys exits)
  import, export  QdstrmImporter and nsys export (nsys alone: timed here one after the other, as
          a user runs them; nsyscomm run: its log's stages)
  summ., shown  nsyscomm run's reading of the export, and its analyses and printing (its log)
  wait    nsyscomm run: from the application's exit to the summary printed (the log's "analyses
          and summary printed" stamp); nsys alone: finish + import + export, the report exported
  exit    nsyscomm run: from the application's exit to nsyscomm run's own exit

The wait of nsyscomm run is compared with two references, per repeat and as medians: nsys alone
(its own OS-runtime defaults, the manual route: finish + QdstrmImporter + export to SQLite, or to
Arrow), and nsys's own share of run's wait (its finish, import and export of that very capture,
from run's log): the second is what a summary that cost nothing would wait. The wait as
measured before (from nsys's exit, against nsys alone's import and SQLite export without its
finish) is printed too. Prints medians over the repeats, and the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "gloo_job.py"
NSYS_FLAGS = ["-s", "none", "--cpuctxsw=none", "-f", "true"]
ALL = ("bare", "nsys", "nsys-light", "nsys-wrapped", "run-sqlite", "run-arrow", "run-light", "run-base")


TIMING = Path(tempfile.gettempdir()) / f"nsyscomm-bench-loop-{os.getpid()}.txt"
STAMP = Path(tempfile.gettempdir()) / f"nsyscomm-bench-exit-{os.getpid()}.txt"


def job_cmd(a) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(a.ranks),
        str(JOB),
        "--calls",
        str(a.calls),
        "--bytes",
        str(a.bytes),
        "--compute-ms",
        str(a.compute_ms),
        "--timing",
        str(TIMING),
    ]


def stamped(cmd: list[str]) -> list[str]:
    """cmd run by sh, which writes the wall-clock time into STAMP once cmd has exited: the
    application's exit, as the user sees it."""
    script = 'stamp=$1; shift; "$@"; rc=$?; date +%s.%N > "$stamp"; exit $rc'
    return ["sh", "-c", script, "sh", str(STAMP), *cmd]


def app_exit() -> float:
    """The wall-clock time the last application's exit was stamped."""
    t = float(STAMP.read_text().split()[0])
    STAMP.unlink()
    return t


def loop_times() -> dict:
    """The job's own loop (after init, before teardown), slowest rank: wall and CPU seconds."""
    rows = [line.split() for line in TIMING.read_text().splitlines()] if TIMING.exists() else []
    TIMING.unlink(missing_ok=True)
    if not rows:
        return {}
    return {"loop": max(float(r[1]) for r in rows), "loop cpu": max(float(r[2]) for r in rows)}


def wall(cmd: list[str], **kw) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, **kw)
    return time.perf_counter() - t0


def importer() -> str:
    from nsyscomm.capture.launcher import find_importer

    return find_importer(shutil.which("nsys"))


def nsys_alone(a, tmp: Path, trace: str, post: bool, wrapped: bool = False) -> dict:
    out = tmp / f"nsys-{trace.replace(',', '-')}{'-wrapped' if wrapped else ''}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    env = None
    if wrapped:  # what nsyscomm run gives the job: the startup hook and the flight record
        from nsyscomm.capture import flight_record
        from nsyscomm.capture.nsys_command import job_env

        env = dict(job_env(None), **{flight_record.ENV_DIR: str(out / "records")})
    cmd = ["nsys", "profile", f"--trace={trace}", *NSYS_FLAGS, "-o", str(out / "report"), *stamped(job_cmd(a))]
    r = {"job": wall(cmd, env=env)}
    r["finish"] = time.time() - app_exit()
    if post:
        q = out / "report.qdstrm"
        if q.exists():  # nsys's own import failed (Debian's packages): the launcher's way
            r["import"] = wall([importer(), "-i", str(q)])
        rep = out / "report.nsys-rep"
        for kind in ("sqlite", "arrow"):
            r[f"export {kind}"] = wall(
                ["nsys", "export", "--type", kind, "-f", "true", "-o", str(out / f"report.{kind}"), str(rep)]
            )
            r[f"size {kind}"] = (out / f"report.{kind}").stat().st_size
        r["size nsys-rep"] = rep.stat().st_size
        r["export"] = r["export sqlite"]  # the manual route's: the table's column
        r["wait"] = r["finish"] + r.get("import", 0.0) + r["export sqlite"]
        r["wait arrow"] = r["finish"] + r.get("import", 0.0) + r["export arrow"]
    return r


JOB_LINE = re.compile(r"^(\S+) job exited with status \d+ after ([\d.]+) s")
STAGE = re.compile(r"^\S+ (import|export \(\w+\)|summarize) .* ([\d.]+) s ok$")
SHOWN = re.compile(r"^(\S+) analyses and summary printed ([\d.]+) s$")


def nsyscomm_run(a, tmp: Path, export: str, preset: str, tree: str | None = None) -> dict:
    """nsyscomm run of the job; tree: the nsyscomm of that folder instead of this one's."""
    out = tmp / f"run-{export}-{preset}{'-base' if tree else ''}"
    env = None
    if tree:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])]))
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-c",
        "import sys; from nsyscomm.cli import entry; sys.argv[0] = 'nsyscomm'; entry()",
        "run",
        "-o",
        str(out),
        "--export",
        export,
        "--preset",
        preset,
        "--",
        *stamped(job_cmd(a)),
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=tree)
    end = time.time()
    exited = app_exit()
    r = {"total": time.perf_counter() - t0, "import": 0.0, "export": 0.0, "summarize": 0.0, "shown": 0.0}
    r["exit"] = end - exited
    for line in (out / "nsyscomm-run.log").read_text().splitlines():
        m = JOB_LINE.match(line)
        if m:
            r["job"] = float(m.group(2))
            nsys_exit = datetime.fromisoformat(m.group(1)).timestamp()
            r["finish"] = nsys_exit - exited
            r["from nsys exit"] = end - nsys_exit
        m = STAGE.match(line)
        if m:
            r[m.group(1).split()[0]] += float(m.group(2))
        m = SHOWN.match(line)
        if m:
            r["shown"] = float(m.group(2))
            r["wait"] = datetime.fromisoformat(m.group(1)).timestamp() - exited
    r["own"] = r["finish"] + r["import"] + r["export"]  # nsys's own share of the wait: its finish, import, export
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default=",".join(v for v in ALL if v != "run-base"))
    ap.add_argument("--baseline", metavar="DIR", help="the nsyscomm tree of variant run-base")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    if "run-base" in variants and not a.baseline:
        sys.exit("variant run-base needs --baseline DIR")
    unknown = set(variants) - set(ALL)
    if unknown:
        sys.exit(f"unknown variants {sorted(unknown)}: choose from {', '.join(ALL)}")
    res: dict[str, list[dict]] = {v: [] for v in variants}
    loads = []
    with tempfile.TemporaryDirectory(prefix="nsyscomm-bench-") as tmp:
        tmp = Path(tmp)
        for i in range(a.repeats):
            for v in variants:
                TIMING.unlink(missing_ok=True)
                if v == "bare":
                    res[v].append({"job": wall(job_cmd(a))})
                elif v == "nsys":
                    res[v].append(nsys_alone(a, tmp, "nvtx,osrt", post=True))
                elif v == "nsys-light":
                    res[v].append(nsys_alone(a, tmp, "nvtx", post=False))
                elif v == "nsys-wrapped":
                    res[v].append(nsys_alone(a, tmp, "nvtx,osrt", post=False, wrapped=True))
                else:
                    export, preset = {
                        "run-sqlite": ("sqlite", "default"),
                        "run-arrow": ("arrow", "default"),
                        "run-light": ("arrow", "light"),
                        "run-base": ("arrow", "default"),
                    }[v]
                    tree = str(Path(a.baseline).resolve()) if v == "run-base" else None
                    res[v].append(nsyscomm_run(a, tmp, export, preset, tree))
                res[v][-1].update(loop_times())
                loads.append(os.getloadavg()[0])
            print(f"# repeat {i + 1}/{a.repeats} done, load {loads[-1]:.2f}", file=sys.stderr, flush=True)

    def med(v: str, k: str) -> float | None:
        xs = [r[k] for r in res.get(v, []) if k in r]
        return statistics.median(xs) if xs else None

    print(
        f"# gloo job: {a.ranks} ranks x {a.calls} all_reduce of {a.bytes} B (+ a broadcast every 10th), "
        f"{a.compute_ms} ms compute before each; medians of {a.repeats} alternated repeats; "
        f"load average {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} cores"
    )
    bare = med("bare", "job")
    bare_loop = med("bare", "loop")
    print(
        f"{'variant':12s} {'job s':>7s} {'x bare':>7s} {'loop s':>7s} {'x bare':>7s} {'loopCPU':>7s} "
        f"{'finish':>7s} {'import':>7s} {'export':>7s} {'summ.':>7s} {'shown':>7s} {'wait s':>7s} {'exit s':>7s} "
        f"{'total s':>8s}"
    )
    for v in variants:
        job, loop = med(v, "job"), med(v, "loop")
        cells = [
            f"{job:7.2f}" if job is not None else f"{'-':>7s}",
            f"{job / bare:7.3f}" if job is not None and bare else f"{'-':>7s}",
            f"{loop:7.2f}" if loop is not None else f"{'-':>7s}",
            f"{loop / bare_loop:7.3f}" if loop is not None and bare_loop else f"{'-':>7s}",
            f"{med(v, 'loop cpu'):7.2f}" if loop is not None else f"{'-':>7s}",
        ]
        for k in ("finish", "import", "export", "summarize", "shown", "wait", "exit", "total"):
            x = med(v, k)
            width = 8 if k == "total" else 7
            cells.append(f"{x:{width}.2f}" if x is not None else f"{'-':>{width}s}")
        print(f"{v:12s} " + " ".join(cells))
    if "nsys" in res:
        n = res["nsys"]
        print(
            f"\nnsys alone's report, after the job: import (QdstrmImporter) {med('nsys', 'import') or 0:.2f} s; "
            f"export sqlite {med('nsys', 'export sqlite'):.2f} s ({med('nsys', 'size sqlite') / 1e6:.1f} MB), "
            f"arrow {med('nsys', 'export arrow'):.2f} s ({med('nsys', 'size arrow') / 1e6:.1f} MB); "
            f".nsys-rep {n[0]['size nsys-rep'] / 1e6:.1f} MB"
        )
    nsys_job, light_job = med("nsys", "job"), med("nsys-light", "job")
    if bare and nsys_job:
        print(f"nsys's overhead (flags of the default preset): x{nsys_job / bare:.3f} the bare job")
    if bare and light_job:
        print(
            f"nsys's overhead, --trace=nvtx only (light preset): x{light_job / bare:.3f}; "
            f"the OS-runtime trace costs x{nsys_job / light_job:.3f}"
            if nsys_job
            else ""
        )
    for v, ref in (
        ("nsys-wrapped", "nsys"),
        ("run-arrow", "nsys-wrapped"),
        ("run-sqlite", "nsys"),
        ("run-arrow", "nsys"),
        ("run-light", "nsys-light"),
    ):
        if v in res and ref in res and med(ref, "job"):
            what = "the launcher's overhead" if ref == "nsys-wrapped" else "the wrapper's overhead"
            print(
                f"{what} ({v} / {ref}, same flags): job x{med(v, 'job') / med(ref, 'job'):.3f}, its loop "
                f"x{med(v, 'loop') / med(ref, 'loop'):.3f} (CPU x{med(v, 'loop cpu') / med(ref, 'loop cpu'):.3f})"
            )
    for v in ("nsys-wrapped", "run-sqlite", "run-arrow", "run-light", "run-base"):  # paired within each repeat
        ref = "nsys-light" if v == "run-light" else "nsys"
        if v in res and ref in res:
            pairs = [x["loop"] / y["loop"] for x, y in zip(res[v], res[ref]) if "loop" in x and "loop" in y]
            if pairs:
                print(f"  {v} / {ref} loop, per repeat: " + ", ".join(f"x{p:.3f}" for p in pairs))
    _waits(res, med)


def _waits(res: dict, med) -> None:
    """The wait after the job of each nsyscomm run variant against nsys alone's and against nsys's
    own share of that run, medians and per repeat; then as measured before (from nsys's exit)."""
    for v in ("run-sqlite", "run-arrow", "run-light", "run-base"):
        if v not in res or med(v, "wait") is None:
            continue
        w, own = med(v, "wait"), med(v, "own")
        print(
            f"\nwait from the application's exit to the summary ({v}): {w:.2f} s (nsyscomm run's own exit "
            f"{med(v, 'exit'):.2f} s); nsys's own share of it (finish {med(v, 'finish'):.2f} + import "
            f"{med(v, 'import'):.2f} + export {med(v, 'export'):.2f} s) {own:.2f} s: x{w / own:.2f}; per repeat "
            + ", ".join(f"x{r['wait'] / r['own']:.2f}" for r in res[v] if "wait" in r)
        )
        ref = "nsys-light" if v == "run-light" else "nsys"
        if ref in res and med(ref, "wait") is not None:
            for kind, key in (("SQLite", "wait"), ("Arrow", "wait arrow")):
                m = med(ref, key)
                print(
                    f"  against {ref} alone, the manual route (finish {med(ref, 'finish'):.2f} + QdstrmImporter "
                    f"{med(ref, 'import') or 0:.2f} + export {kind} {m - med(ref, 'finish') - (med(ref, 'import') or 0):.2f} s"
                    f" = {m:.2f} s): x{w / m:.2f}; per repeat "
                    + ", ".join(
                        f"x{x['wait'] / y[key]:.2f}" for x, y in zip(res[v], res[ref]) if "wait" in x and key in y
                    )
                )
            before = (med(ref, "import") or 0) + med(ref, "export sqlite")
            print(
                f"  as measured before (from nsys's exit to run's exit, against {ref}'s import + SQLite export "
                f"without its finish): {med(v, 'from nsys exit'):.2f} s = x{med(v, 'from nsys exit') / before:.2f} of {before:.2f} s"
            )


if __name__ == "__main__":
    main()
