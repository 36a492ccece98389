"""Commands under low limits (``ulimit -v``, ``ulimit -n``): one line naming the limit and its fix,
exit status 2, within seconds; never a hang in a native library, an abort or a traceback."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import time

import pytest

from nsyscomm import resources
from tests.conftest import ROOT, SAMPLES


def _under(limit: int, which: int):
    def preexec() -> None:
        resource.setrlimit(which, (limit, limit))

    return preexec


def _nsyscomm(args, limit: int, which: int, timeout: float = 120):
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "nsyscomm.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        preexec_fn=_under(limit, which),
    )
    return r, time.monotonic() - t0


@pytest.mark.parametrize(
    "args",
    [
        ["summarize", SAMPLES / "synthetic_ddp_4rank.sqlite", "--no-cache"],
        ["trace", SAMPLES / "synthetic_ddp_4rank.sqlite", "-o", "{tmp}/t.json"],
        ["run", "--", "true"],
    ],
    ids=["summarize", "trace", "run"],
)
def test_a_low_address_space_limit_is_one_line_and_exit_2(args, tmp_path):
    """ulimit -v 400000: OpenBLAS hung on a lock after its allocations failed, pandas' libraries
    could not be mapped (a traceback), Arrow aborted: now refused before any of them loads."""
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    r, took = _nsyscomm(args, 400_000 * 1024, resource.RLIMIT_AS, timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "out of memory" in lines[0] and "ulimit -v" in lines[0], r.stderr[-2000:]
    assert took < 30
    assert not (tmp_path / "t.json").exists()


def test_at_the_floor_the_bundled_sample_is_read(tmp_path):
    """MIN_ADDRESS_SPACE is enough for the smallest input: the refusal above is not too eager."""
    r, _ = _nsyscomm(
        ["summarize", SAMPLES / "synthetic_ddp_4rank.sqlite", "--no-cache", "--format", "json"],
        resources.MIN_ADDRESS_SPACE,
        resource.RLIMIT_AS,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"summary"' in r.stdout


def test_too_many_open_files_names_the_limit_and_the_fix():
    """ulimit -n 16 and a folder of reports (extracted by a pool of workers, each over pipes): the
    pool's fork server failed with a traceback, or "Too many open files" named no limit."""
    r, took = _nsyscomm(["summarize", SAMPLES / "synthetic_nowrapper_2node", "--no-cache"], 16, resource.RLIMIT_NOFILE)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "too many open files" in lines[0] and "ulimit -n" in lines[0], r.stderr
    assert "is 16" in lines[0] and took < 30


def test_the_failures_a_limit_causes_are_recognised():
    mapped = ImportError("conversion.cpython-311-x86_64-linux-gnu.so: failed to map segment from shared object")
    assert resources.out_of_memory(mapped) and resources.out_of_memory(MemoryError())
    assert not resources.out_of_memory(ValueError("a bad value"))
    assert "ulimit -n" in (resources.out_of_files(OSError(errno.EMFILE, "Too many open files")) or "")
    assert resources.out_of_files(OSError(errno.ENOENT, "No such file")) is None


def test_under_a_limit_the_native_libraries_are_set_up_before_they_load():
    code = (
        "import resource, os; resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30)); "
        "from nsyscomm import resources; resources.prepare(); "
        "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['ARROW_DEFAULT_MEMORY_POOL'])"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["1", "system"]
