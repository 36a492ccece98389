"""A small report's summary does only the work a small report needs: one report starts no
process pool (multiprocessing is not even imported), and every DuckDB database it makes runs on
one thread (nsyscomm.duck.small_input). Run as the program, in a process of its own: the test
session has imported multiprocessing itself."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import SAMPLES

# nsyscomm's program with duck.connect watched: each database's thread count when it was made,
# and the pool's modules imported by the end, written to a file (the program leaves through
# os._exit, with its output flushed before the exit functions run)
_WATCHED = """
import atexit, json, sys
from nsyscomm import duck

made = []
real = duck.connect
out = sys.argv[1]


def connect(*args, **kwargs):
    con = real(*args, **kwargs)
    made.append(duck.threads(con))
    return con


def write():
    loaded = [m for m in ("multiprocessing", "concurrent.futures.process") if m in sys.modules]
    with open(out, "w") as f:
        json.dump({"threads": made, "loaded": loaded}, f)


duck.connect = connect
atexit.register(write)
sys.argv = ["nsyscomm", "summarize", *sys.argv[2:], "--no-cache"]
from nsyscomm.__main__ import entry

entry()
"""


def _watched(tmp_path, *args: str) -> dict:
    out = tmp_path / "watched.json"
    run = subprocess.run(
        [sys.executable, "-c", _WATCHED, str(out), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0 and run.stdout, run.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.timeout(320)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_small_report_starts_no_pool_and_runs_duckdb_on_one_thread(tmp_path, fmt):
    seen = _watched(tmp_path, str(SAMPLES / "synthetic_ddp_4rank.sqlite"), "--format", fmt)
    assert seen["loaded"] == []
    # the report's database (read ahead while the rest is imported) and the job's
    assert seen["threads"] == [1, 1]
