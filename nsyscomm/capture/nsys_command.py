"""The nsys command line of ``nsyscomm run``: finding nsys, the trace presets and profile flags,
the job's environment (the wrapper's startup hook on PYTHONPATH) and the rewriting of a torchrun
command for one nsys per rank (``--per-rank``)."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from nsyscomm.errors import InputError
from nsyscomm.nvtx_format import CAPTURE_RANGE, DOMAIN

MIN_NSYS = (2021, 3)
INSTALL_HINT = (
    "install Nsight Systems: on Debian/Ubuntu add the non-free component and "
    "`apt-get install --no-install-recommends nsight-systems nsight-systems-target`, "
    "or download it from https://developer.nvidia.com/nsight-systems"
)
HOOK_DIR = Path(__file__).resolve().parent / "_hook"
PKG_PARENT = Path(__file__).resolve().parent.parent.parent


def find_nsys() -> tuple[str, tuple]:
    nsys = os.environ.get("NSYSCOMM_NSYS") or shutil.which("nsys")
    if not nsys:
        raise InputError(f"nsys (Nsight Systems) is not on PATH: {INSTALL_HINT}")
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60).stdout
    except Exception as e:
        raise InputError(f"nsys at {nsys} does not run ({e}): {INSTALL_HINT}") from None
    m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?", out or "")
    if not m:
        raise InputError(f"cannot read the version of {nsys} ({out.strip()!r}): {INSTALL_HINT}")
    ver = tuple(int(x) for x in m.groups() if x is not None)
    if ver[:2] < MIN_NSYS:
        raise InputError(
            f"nsys {'.'.join(map(str, ver))} is too old (need >= {'.'.join(map(str, MIN_NSYS))}): {INSTALL_HINT}"
        )
    return nsys, ver


def has_gpu() -> bool:
    """A GPU is visible (device nodes alone are not enough: containers expose /dev/nvidiactl without one)."""
    if glob.glob("/proc/driver/nvidia/gpus/*"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            return r.returncode == 0 and "GPU" in r.stdout
        except Exception:
            return False
    return False


def torchrun_split(cmd: list[str]) -> tuple[list[str], bool, list[str]] | None:
    """Split a torchrun command into (launcher part, module flag, script+args), or None if not torchrun."""
    if not cmd:
        return None
    head = os.path.basename(cmd[0])
    if head == "torchrun":
        start = 1
    elif (
        re.fullmatch(r"python[\d.]*", head)
        and len(cmd) > 2
        and cmd[1] == "-m"
        and cmd[2] in ("torch.distributed.run", "torch.distributed.launch")
    ):
        start = 3
    else:
        return None
    try:
        from torch.distributed.run import get_args_parser

        parser = get_args_parser()
        flags: set[str] = set()
        for action in parser._actions:
            if action.nargs == 0:
                flags.update(action.option_strings)
    except Exception:
        flags = {
            "--standalone",
            "--no-python",
            "--no_python",
            "-m",
            "--module",
            "--run-path",
            "--run_path",
            "--virtual-local-rank",
            "--virtual_local_rank",
            "-h",
            "--help",
        }
    i = start
    module = False
    opts: list[str] = []
    while i < len(cmd):
        a = cmd[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        if a in ("-m", "--module"):
            module = True
        elif a in ("--no-python", "--no_python"):
            raise InputError(
                "--per-rank cannot wrap a torchrun command that already uses --no-python; "
                "drop --per-rank to get one report for the whole process tree"
            )
        else:
            opts.append(a)
        if "=" not in a and a not in flags:
            i += 1
            if i < len(cmd):
                opts.append(cmd[i])
        i += 1
    return cmd[:start] + opts, module, cmd[i:]


def job_env(steps_ab: tuple[int, int] | None) -> dict:
    env = dict(os.environ)
    parts = [str(HOOK_DIR), str(PKG_PARENT)]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["NSYSCOMM_ANNOTATE"] = "1"
    if steps_ab is not None:
        env["NSYSCOMM_CAPTURE_STEPS"] = f"{steps_ab[0]}:{steps_ab[1]}"
        env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    return env


# issue 24: what nsys traces. default: what the analyses need (the OS runtime calls give the
# causes of late arrivals); light: NVTX (and CUDA) only, for jobs where the capture overhead
# matters (docs/performance.md measures both).
PRESETS = {"default": ("nvtx", "osrt"), "light": ("nvtx",)}


def trace_for(preset: str, gpu: bool) -> str:
    """The --trace value of a preset: cuda first when a GPU is visible."""
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}")
    return ",".join((("cuda",) if gpu else ()) + PRESETS[preset])


def nsys_profile_args(
    nsys: str, out_base: str, steps_ab: tuple[int, int] | None, nsys_args: str | None, trace: str
) -> list[str]:
    args = [nsys, "profile", f"--trace={trace}", "-s", "none", "--cpuctxsw=none", "-o", out_base, "-f", "true"]
    if steps_ab is not None:
        args += ["-c", "nvtx", "-p", f"{CAPTURE_RANGE}@{DOMAIN}", "--capture-range-end=stop"]
    if nsys_args:
        args += shlex.split(nsys_args)
    return args
