"""A short soak of the extraction pool (benchmarks/soak_pool.py is the long one): loads serial and
parallel, cache on and off, in a process whose own threads keep DuckDB and numpy busy, then the CLI
on the folder; each loop and run bounded in time. A forked worker could inherit a lock one of those
threads held and wait for it forever."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.conftest import ROOT


def _soak():
    spec = importlib.util.spec_from_file_location("soak_pool", ROOT / "benchmarks" / "soak_pool.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# a loop or a run that has not ended in this long has hung: a hang lasts for ever, a loop takes
# seconds, and under a load of 20 on 2 cores some ten times more
HANG_S = 300


@pytest.mark.timeout(1200)
def test_loads_and_commands_beside_busy_threads_never_hang(tmp_path):
    soak = _soak()
    folder = soak.make_folder(tmp_path / "reports", 3)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # (loops ended, hangs): a loop is four loads, serial and parallel, without and with the cache
    assert soak.soak_loads(folder, loops=4, timeout=HANG_S, env=env) == (4, 0)
    assert soak.soak_cli(folder, runs=2, timeout=HANG_S, env=env) == (2, 0)
