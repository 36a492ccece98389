"""The program's exit once its command has returned (nsyscomm.__main__._leave): at once, its
output whole, its exit functions run and its folders removed, and a Ctrl-C or SIGTERM during
the exit one line with status 130 or 143, never a traceback, an abort or a death by the signal.

Each case runs the program in a child process, as its console script does, on `--version` (a
command that returns at once) or a summary of a small sample, with what the case needs set up
around it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nsyscomm
from tests.conftest import ROOT, sample

# how long a child may take to start and run `--version` on a loaded machine
WITHIN_S = 120

_PROGRAM = """
import sys
from nsyscomm.__main__ import entry
sys.argv[1:] = {argv!r}
{setup}
entry()
"""


def _run(setup: str, tmp: Path, argv: tuple[str, ...] = ("--version",)) -> subprocess.CompletedProcess:
    path = os.pathsep.join(dict.fromkeys([str(Path(nsyscomm.__file__).parents[1]), str(ROOT)]))
    env = dict(os.environ, PYTHONPATH=path, NSYSCOMM_TEMP_DIR=str(tmp))
    code = _PROGRAM.format(setup=setup, argv=list(argv))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp, timeout=WITHIN_S
    )


def test_ctrl_c_during_the_exit_is_one_line_and_130(tmp_path):
    """Ctrl-C once the command is done, while the exit functions run: before, a KeyboardInterrupt
    there was a traceback ("Exception ignored in atexit callback") with status 0, or cut short
    the interpreter's join of the threads, and a DuckDB thread still running aborted the process."""
    summary = ("summarize", str(sample("synthetic_ddp_4rank.sqlite")), "--no-cache", "--format", "json")
    setup = "import atexit, os, signal\natexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))"
    out = _run(setup, tmp_path, summary)
    assert (out.returncode, out.stderr) == (130, "nsyscomm: interrupted\n"), out
    assert json.loads(out.stdout)["schema"]  # the command's output, whole


def test_sigterm_during_the_exit_is_one_line_and_143(tmp_path):
    out = _run("import atexit, os, signal\natexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))", tmp_path)
    assert (out.returncode, out.stderr) == (143, "nsyscomm: terminated\n"), out


def test_the_exit_waits_for_no_thread(tmp_path):
    """A thread still at work when the command returns (a database being closed on a thread of
    its own, duck.close_soon) neither delays the exit nor outlives it: the interpreter's teardown
    joined it, and a Ctrl-C during that join let the process go on without it."""
    setup = "import threading, time\nthreading.Thread(target=time.sleep, args=(3 * 60,)).start()"
    out = _run(setup, tmp_path)  # the join would wait three minutes: longer than WITHIN_S
    assert (out.returncode, out.stderr) == (0, ""), out


def test_the_exit_functions_run_and_the_spill_folders_go(tmp_path):
    """Without the teardown no database is closed, and DuckDB removes a spill folder when its
    database closes: the program removes its own (not another process's), and runs the exit
    functions registered (the job's database folder, nsyscomm.temp_folders)."""
    other = tmp_path / "nsyscomm-spill-elsewhere-1-0"
    other.mkdir()
    setup = (
        "import atexit, os\n"
        "from nsyscomm import temp_folders\n"
        "os.makedirs(temp_folders.spill_folder())\n"
        "atexit.register(lambda: print('exit functions ran', flush=True))"
    )
    out = _run(setup, tmp_path)
    assert (out.returncode, out.stderr) == (0, ""), out
    assert out.stdout.splitlines()[-1] == "exit functions ran"
    assert sorted(os.listdir(tmp_path)) == [other.name]


def test_a_message_to_exit_with_is_written_and_status_1(tmp_path):
    """SystemExit with a message (a library's sys.exit("...")): written and status 1, as Python does."""
    out = _run("import nsyscomm.cli as c\nc.entry = lambda: sys.exit('no way')", tmp_path)
    assert (out.returncode, out.stderr) == (1, "no way\n"), out
