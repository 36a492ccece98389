"""The nsys command line of ``nsyscomm run``: finding nsys, the trace presets and profile flags,
the job's environment (the wrapper's startup hook on PYTHONPATH) and the rewriting of a torchrun
command for one nsys per rank (``--per-rank``)."""

from __future__ import annotations

import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nsyscomm import settings
from nsyscomm.errors import InputError
from nsyscomm.ingest.limits import HOST_MIN_NS
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
    nsys = settings.nsys() or shutil.which("nsys")
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


@dataclass(frozen=True)
class Preset:
    """What nsys traces (``--trace``, cuda added when a GPU is visible) and the profile options
    that go with it."""

    trace: tuple[str, ...]
    options: tuple[str, ...] = ()
    about: str = ""


# The OS-runtime trace's own defaults (every call from 1 us, a 6 KiB stack dump for each call over
# 80 us) filled gigabytes on a one-GPU NCCL job (docs/performance.md, "The GPU path"):
# NCCL's and CUDA's helper threads wait in short timed calls all the time. The late-arrival
# diagnosis reads only calls of at least limits.HOST_MIN_NS and never their stacks, so the default
# preset asks nsys for exactly that: calls from HOST_MIN_NS on, no stack dumps below 1 s.
OSRT_OPTIONS = (f"--osrt-threshold={HOST_MIN_NS}", "--osrt-backtrace-threshold=1000000000")
PRESETS = {
    "default": Preset(("nvtx", "osrt"), OSRT_OPTIONS, "NVTX, CUDA and the OS-runtime calls the diagnosis reads"),
    "light": Preset(("nvtx",), (), "NVTX and CUDA only: the smallest report; late arrivals' host causes are not named"),
    "full": Preset(("nvtx", "osrt"), (), "nsys's own OS-runtime defaults (every call, with stacks): large on GPU jobs"),
}


def _preset(preset: str) -> Preset:
    if preset not in PRESETS:
        raise InputError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[preset]


def trace_for(preset: str, gpu: bool) -> str:
    """The --trace value of a preset: cuda first when a GPU is visible."""
    return ",".join((("cuda",) if gpu else ()) + _preset(preset).trace)


def preset_options(preset: str) -> tuple[str, ...]:
    """The nsys profile options of a preset, besides --trace."""
    return _preset(preset).options


def nsys_profile_args(
    nsys: str,
    out_base: str,
    steps_ab: tuple[int, int] | None,
    nsys_args: str | None,
    trace: str,
    options: tuple[str, ...] = (),
) -> list[str]:
    """The ``nsys profile`` command line; the user's --nsys-args come last, so they win."""
    args = [nsys, "profile", f"--trace={trace}", *options, "-s", "none", "--cpuctxsw=none"]
    args += ["-o", out_base, "-f", "true"]
    if steps_ab is not None:
        args += ["-c", "nvtx", "-p", f"{CAPTURE_RANGE}@{DOMAIN}", "--capture-range-end=stop"]
    if nsys_args:
        args += shlex.split(nsys_args)
    return args


# NVTX extended payloads (NCCL's message sizes and communicators) leave the report only with
# this export option, which nsys has had since 2023 (docs/architecture.md, "Facts about nsys
# exports"); older exports have no binaryData column at all. jsonText (--include-json) carries the
# same values, larger, so blobs alone are asked for.
PAYLOAD_FLAG = "--include-blobs"


@functools.lru_cache(maxsize=8)
def export_help(nsys: str) -> str:
    """``nsys export --help`` of this nsys ("" when it does not answer)."""
    try:
        r = subprocess.run([nsys, "export", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (r.stdout or "") + (r.stderr or "")


def export_payload_flags(help_text: str) -> list[str]:
    """The export options that keep NVTX payloads, as far as this nsys's help names them."""
    return [f"{PAYLOAD_FLAG}=true"] if PAYLOAD_FLAG in help_text else []


def nsys_export_args(nsys: str, export: str, out: str, rep: str, help_text: str | None = None) -> list[str]:
    """The ``nsys export`` command line of one report: the format, the payload options this nsys
    has (help_text: its ``nsys export --help``, asked when not given), overwrite, output, input."""
    flags = export_payload_flags(export_help(nsys) if help_text is None else help_text)
    return [nsys, "export", "--type", export, *flags, "-f", "true", "-o", out, rep]
