"""--baseline DIR for the benchmarks: a check that runs made with PYTHONPATH=DIR use DIR's code and
DIR's SQL, not this checkout's.

Before nsyscomm.bundled, the SQL folder was found through importlib.resources, and an editable
install of another checkout answered for ``nsyscomm.sql``: a baseline's runs read this checkout's
SQL, and SQL changes were compared with themselves. A baseline made before that commit passes
the check once its tree holds a link to its own SQL: ln -s ../sql DIR/nsyscomm/sql (the
package's own folder is searched before the editable install's finder).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

PROBE = "import nsyscomm, nsyscomm.duck as d; print(nsyscomm.__file__); print(d.sql_dir())"
# the folder every measured run starts in: `python -c` puts its current folder first on sys.path,
# ahead of PYTHONPATH, so run from a checkout, a baseline's runs would import that checkout's nsyscomm
RUN_DIR = tempfile.gettempdir()

T = TypeVar("T")


def check(directory: str | os.PathLike, env: dict) -> None:
    """Exit with a one-line reason unless a run under env imports nsyscomm and its SQL from directory."""
    root = Path(directory).resolve()
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=RUN_DIR)
    if out.returncode:
        raise SystemExit(f"--baseline {root}: nsyscomm does not import there ({out.stderr.strip()[-300:]})")
    code, sql = (Path(line).resolve() for line in out.stdout.split())
    if root not in code.parents:
        raise SystemExit(f"--baseline {root}: its runs import nsyscomm from {code.parent}, not from it")
    if root not in sql.parents:
        raise SystemExit(
            f"--baseline {root}: its runs read the SQL in {sql}, not its own; "
            f"link its SQL into its package: ln -s ../sql {root / 'nsyscomm' / 'sql'}"
        )


def environments(env: dict, directory: str | os.PathLike | None) -> tuple[dict, dict | None]:
    """The environments of this checkout's runs and of directory's (None without one), each tree's
    .pyc files written first. An installed package has its .pyc files (pip compiles them); with
    PYTHONDONTWRITEBYTECODE set, as in this project's sandbox, every run would compile the modules
    changed since the last run that wrote them."""
    import nsyscomm

    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    compileall.compile_dir(os.path.dirname(nsyscomm.__file__), quiet=1)
    if directory is None:
        return env, None
    compileall.compile_dir(os.path.join(directory, "nsyscomm"), quiet=1)
    base_env = dict(env, PYTHONPATH=os.path.abspath(directory))
    check(directory, base_env)  # its own code and SQL, not this checkout's
    return env, base_env


def in_turn(run: int, arms: Iterable[T]) -> list[T]:
    """The arms of a side-by-side comparison in the order of its run number `run`: as given on
    even runs, reversed on odd ones, so that neither always runs first, just after the other has
    warmed the caches or while the load it left is still on the machine."""
    arms = list(arms)
    return arms if run % 2 == 0 else arms[::-1]
