"""summarize --dask against a real cluster: a scheduler and a worker started here as processes of
their own on 127.0.0.1, the worker in another current folder than the command's, the reports
given by a relative path; and --dask local, a cluster started for the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsyscomm.cli import main
from tests.extract.test_pool_ends import _path

pytest.importorskip("distributed")

# the scheduler and worker start in seconds; a limit far past that, for a loaded machine
START_S = 120


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    import importlib.util

    from tests.extract.test_pool_ends import ROOT

    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path_factory.mktemp("dask") / "reports"
    gen.generate(out, ranks=3, steps=2, layers=3, kernels_per_layer=10, nccl_share=0.2, per_rank=True, quiet=True)
    return out


def _start(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=_path()),
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """The address of a scheduler with one worker, each a process of its own."""
    from distributed import Client

    d = tmp_path_factory.mktemp("cluster")
    (d / "worker-cwd").mkdir()
    info = d / "scheduler.json"
    host = ["--host", "127.0.0.1", "--no-dashboard"]
    procs = [
        _start(["distributed.cli.dask_scheduler", *host, "--port", "0", "--scheduler-file", str(info)], d, d / "s.log")
    ]
    try:
        end = time.monotonic() + START_S
        while not info.exists() and time.monotonic() < end and procs[0].poll() is None:
            time.sleep(0.2)
        assert info.exists(), (d / "s.log").read_text()[-2000:]
        worker = ["distributed.cli.dask_worker", *host, "--scheduler-file", str(info), "--nthreads", "1", "--no-nanny"]
        procs.append(_start(worker, d / "worker-cwd", d / "w.log"))
        address = json.loads(info.read_text())["address"]
        with Client(address, timeout=START_S) as c:
            c.wait_for_workers(1, timeout=START_S)
        yield address
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _summary(args: list[str]) -> list:
    r = CliRunner().invoke(main, ["summarize", *args, "--no-cache", "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["summary"]


@pytest.mark.timeout(300)
def test_a_relative_folder_is_extracted_on_a_dask_worker_in_another_folder(reports, scheduler, monkeypatch):
    ref = _summary([str(reports), "--jobs", "1"])
    monkeypatch.chdir(reports.parent)
    assert _summary([reports.name, "--dask", scheduler]) == ref


@pytest.mark.timeout(300)
def test_dask_local_starts_a_cluster_for_the_run(reports):
    import threading

    ref = _summary([str(reports), "--jobs", "1"])
    before = set(threading.enumerate())
    assert _summary([str(reports), "--dask", "local", "--jobs", "2"]) == ref

    def left() -> list[str]:  # but distributed's own offload thread, one per process for good
        return [t.name for t in set(threading.enumerate()) - before if not t.name.startswith("Dask-Offload")]

    end = time.monotonic() + 30  # the cluster was closed: its threads end
    while left() and time.monotonic() < end:
        time.sleep(0.2)
    assert left() == []


def test_a_dask_address_with_no_scheduler_is_one_line(reports):
    r = CliRunner().invoke(main, ["summarize", str(reports), "--no-cache", "--dask", "nowhere"])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("nsyscomm: error: --dask nowhere: no Dask scheduler reached there")
    assert len(r.stderr.strip().splitlines()) == 1
