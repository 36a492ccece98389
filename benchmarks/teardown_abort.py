"""How often a gloo job fails at teardown, bare, with only the wrapper (the `nsyscomm run` startup
hook on PYTHONPATH, no nsys), under nsys alone with the launcher's flags (no wrapper) and under
`nsyscomm run`. Jobs: `mesh`, the 4-rank DeviceMesh job (benchmarks/mesh_teardown_job.py);
`late`, the 2-rank job of the late-arrival test (tests/data/late_job.py).

    python benchmarks/teardown_abort.py --runs 20 --modes bare,hook,nsys,run [--job late] [--launcher spawn]
    python benchmarks/teardown_abort.py --runs 40 --modes bare --script my_job.py --nproc 2

Prints, per mode: runs, failures (nonzero exit), and how many printed "terminate called".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOBS = {"mesh": (HERE / "mesh_teardown_job.py", 4), "late": (HERE.parent / "tests" / "data" / "late_job.py", 2)}
JOB, NPROC = JOBS["mesh"]
HOOK = HERE.parent / "nsyscomm" / "capture" / "_hook"
LAUNCHER = "torchrun"


def one(mode: str, tmp: Path, i: int) -> tuple[int, bool, float]:
    env = dict(os.environ)
    if LAUNCHER == "spawn":
        cmd = [sys.executable, str(JOB), str(tmp / f"store-{mode}-{i}")]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(NPROC), str(JOB)]
    if mode == "hook":
        env["PYTHONPATH"] = os.pathsep.join([str(HOOK), str(HERE.parent), env.get("PYTHONPATH", "")])
    elif mode == "nsys":
        from nsyscomm.capture.nsys_command import nsys_profile_args, preset_options, trace_for

        trace = trace_for("default", gpu=False)
        cmd = [*nsys_profile_args("nsys", str(tmp / f"nsys-{i}"), None, None, trace, preset_options("default")), *cmd]
    elif mode == "run":
        # this checkout's nsyscomm, whatever is installed
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
        cmd = [
            sys.executable,
            "-c",
            "from nsyscomm.cli import main; main()",
            "run",
            "--no-summary",
            "-o",
            str(tmp / f"out-{i}"),
            "--",
            *cmd,
        ]
    t = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    return p.returncode, "terminate called" in out, time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modes", default="bare,hook,run")
    ap.add_argument("--launcher", choices=["torchrun", "spawn"], default="torchrun")
    ap.add_argument("--job", choices=sorted(JOBS), default="mesh")
    ap.add_argument("--script", type=Path, help="another job script, run under torchrun (with --nproc)")
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args()
    global LAUNCHER, JOB, NPROC
    LAUNCHER = a.launcher
    JOB, NPROC = (a.script.resolve(), a.nproc) if a.script else JOBS[a.job]
    if a.launcher == "spawn" and (a.job != "mesh" or a.script):
        ap.error("--launcher spawn runs the mesh job only")
    modes = a.modes.split(",")
    counts = {m: [0, 0, 0, 0.0] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.runs):  # interleaved, so that load affects every mode alike
            for m in modes:
                rc, term, s = one(m, Path(d), i)
                c = counts[m]
                c[0] += 1
                c[1] += rc != 0
                c[2] += term
                c[3] += s
                print(f"{m} run {i}: exit {rc}{' terminate called' if term else ''} ({s:.0f} s)", flush=True)
    for m, (n, fail, term, s) in counts.items():
        print(f"{m}: {n} runs, {fail} failed, {term} 'terminate called', {s / max(n, 1):.0f} s a run")


if __name__ == "__main__":
    main()
