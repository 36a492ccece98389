"""Scale: Parquet cache, parallel extraction, Dask, large-report generator."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pandas as pd
import pytest

from nsyscomm import api, discover, duck
from nsyscomm.combine import calls as combine_calls
from nsyscomm.extract import cache, pool
from tests.conftest import ROOT

SAMPLE = ROOT / "sample_reports" / "synthetic_ddp_4rank.sqlite"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_large_report", ROOT / "benchmarks" / "gen_large_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NSYSCOMM_CACHE_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    info = _gen().generate(out, ranks=6, steps=2, layers=3, kernels_per_layer=10, nccl_share=0.2, per_rank=True)
    return out, info


def _same(a, b):
    for attr in ("calls", "markers", "spans"):
        x, y = getattr(a, attr), getattr(b, attr)
        assert (x is None) == (y is None), attr
        if attr == "calls":  # Arrow: the same types, then the rows as below
            assert x.schema == y.schema
            x, y = x.to_pandas(), y.to_pandas()
        if x is not None:
            # row order of an extract is not part of its contract (parallel SQL): compare as sets of rows
            xs = x.astype(str).sort_values(list(x.columns)).reset_index(drop=True)
            ys = y.astype(str).sort_values(list(y.columns)).reset_index(drop=True)
            pd.testing.assert_frame_equal(xs, ys)
    assert (a.report, a.session_start_utc_ns, a.nsys_version, a.warnings) == (
        b.report,
        b.session_start_utc_ns,
        b.nsys_version,
        b.warnings,
    )


def _result_json(r) -> dict:
    from nsyscomm.views.json_out import dumps

    return json.loads(dumps(r, False))


def test_cache_round_trip_and_hit(cache_home, tmp_path):
    src = tmp_path / SAMPLE.name
    shutil.copy(SAMPLE, src)
    fresh = api.extract_one(src, "r")
    first = cache.cached_extract(src, "r")
    _same(fresh, first)
    entries = [p for p in cache_home.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "meta.json").exists()
    assert not list(tmp_path.glob("*.parquet"))  # nothing beside the input
    hit = cache.load(src, "r")
    assert hit is not None
    _same(fresh, hit)


def test_cache_key_follows_size_mtime_and_name(tmp_path):
    src = tmp_path / SAMPLE.name
    shutil.copy(SAMPLE, src)
    k = cache.key(src, "r")
    assert cache.key(src, "other") != k
    import os

    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert cache.key(src, "r") != k


def test_corrupt_entry_is_rebuilt(cache_home, tmp_path):
    src = tmp_path / SAMPLE.name
    shutil.copy(SAMPLE, src)
    cache.cached_extract(src, "r")
    entry = cache_home / cache.key(src, "r")
    (entry / "calls.parquet").write_bytes(b"not parquet")
    assert cache.load(src, "r") is None and not entry.exists()
    again = cache.cached_extract(src, "r")
    _same(api.extract_one(src, "r"), again)
    assert cache.load(src, "r") is not None
    (entry / "meta.json").write_text("{")
    assert cache.load(src, "r") is None


def test_no_cache_writes_nothing(cache_home):
    api.load([SAMPLE], cache=False)
    assert not cache_home.exists() or not any(cache_home.iterdir())


def test_parallel_equals_serial(per_rank):
    folder, info = per_rank
    serial = api.load([folder], jobs=1, cache=False)
    parallel = api.load([folder], jobs=2, cache=False)
    cached = api.load([folder], jobs=2)
    again = api.load([folder], jobs=2)  # from the cache
    ref = _result_json(serial)
    assert ref["summary"] and sum(r["calls"] for r in ref["summary"]) == info["ranks"] * info["collectives_per_rank"]
    for other in (parallel, cached, again):
        assert _result_json(other) == ref


def test_calls_past_a_batch_go_to_the_jobs_database_with_the_same_result(per_rank, monkeypatch):
    """A job's calls past a batch (nsyscomm.combine.calls.BATCH_CALLS; a quarter of the memory limit) are moved into
    the job's database as the reports arrive, in the pool's order of completion, and let go of:
    the same result as in one batch, serial or parallel, and no report's calls held afterwards."""
    folder, info = per_rank
    ref = _result_json(api.load([folder], jobs=1, cache=False))
    total = info["ranks"] * info["collectives_per_rank"]
    held = []
    real_add = combine_calls.JobCalls.add

    def add(self, i, e):
        out = real_add(self, i, e)
        held.append(sum(len(c) for _, _, c in self._pending))
        return out

    monkeypatch.setattr(combine_calls.JobCalls, "add", add)
    stored = []  # the calls appended to calls_in, a batch at a time
    real_store = combine_calls.JobCalls._store

    def store(self):
        stored.append(sum(len(c) for _, _, c in self._pending))
        return real_store(self)

    monkeypatch.setattr(combine_calls.JobCalls, "_store", store)
    monkeypatch.setattr(combine_calls, "BATCH_CALLS", info["collectives_per_rank"] * 2)  # 2 reports a batch, 3 batches
    for jobs in (1, 2):
        held.clear()
        stored.clear()
        got = api.load([folder], jobs=jobs, cache=False)
        assert _result_json(got) == ref
        assert sum(stored) == total and len(stored) > 1
        # and let go of once the collectives table holds them
        assert not got.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'calls_in'").fetchone()[0]
        assert max(held) < 2 * info["collectives_per_rank"]  # never a whole batch left in Arrow
    # under a memory limit, a quarter of it makes a batch
    monkeypatch.setattr(combine_calls, "BATCH_CALLS", 1_000_000)
    monkeypatch.setenv("NSYSCOMM_MEMORY_LIMIT", "12MB")
    calls = combine_calls.JobCalls()
    assert "con" not in vars(calls)  # no database before the first extract: the pool's workers fork first
    assert calls.batch == duck.memory_limit_bytes(calls.con) // 4 // combine_calls.ARROW_BYTES_PER_CALL < 12_000


def test_generator_counts(per_rank):
    folder, info = per_rank
    r = api.load([folder], cache=False)
    assert len(r.reports) == info["reports"] == 6
    assert sorted(r.ranks["rank"]) == list(range(6))
    assert int(r.summary["count"].sum()) == info["logical_collectives"]
    assert not [w for w in r.warnings if "fewer ranks" in w]


def test_progress_flag_does_not_change_results(per_rank, capsys):
    folder, _ = per_rank
    files = discover.discover([folder])
    names = discover.report_names(files)
    a = pool.extract_many(files, names, jobs=1, cache=False, progress=True)
    b = pool.extract_many(files, names, jobs=1, cache=False, progress=False)
    for x, y in zip(a, b):
        _same(x, y)
    assert "extracting" in capsys.readouterr().err


def test_errors_surface_from_workers(tmp_path):
    from nsyscomm.errors import InputError

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(InputError):
        api.load([SAMPLE, bad], jobs=2, cache=False)


def test_dask_local_cluster_equals_local_run(per_rank):
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    folder, _ = per_rank
    ref = _result_json(api.load([folder], jobs=1, cache=False))
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        got = api.load([folder], dask=cluster.scheduler_address, cache=False)
    assert _result_json(got) == ref


def _threads_given(path, name, cache, threads):
    return threads


def test_dask_workers_share_the_cores(monkeypatch):
    """On Dask, as in the local pool, each report's DuckDB gets its share of the host's cores (the
    cores over the cluster's threads there), not every core in each of the threads."""
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    monkeypatch.setattr(pool, "_one", _threads_given)  # the workers are threads of this process
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        seen = pool._on_dask(
            ["a", "b", "c"], ["a", "b", "c"], False, cluster.scheduler_address, 2, pool._Bar(False, 3, "t"), pool._as_is
        )
    assert seen == [max(1, pool.usable_cores() // 2)] * 3


def _path_given(path, name, cache, threads):
    return path


def test_dask_tasks_take_several_reports_in_order(monkeypatch):
    """Many reports go to Dask a few to a task, and every extract comes back in its report's place."""
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    assert [len(range(1024)[p]) for p in pool._parts(1024, 2)] == [pool.DASK_MOST_PER_TASK] * (
        1024 // pool.DASK_MOST_PER_TASK
    )
    assert [len(range(3)[p]) for p in pool._parts(3, 2)] == [1, 1, 1]
    monkeypatch.setattr(pool, "_one", _path_given)
    files = [f"/r{i}" for i in range(50)]
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        got = pool._on_dask(files, files, False, cluster.scheduler_address, 2, pool._Bar(False, 50, "t"), pool._as_is)
    assert got == files


def test_the_workers_share_the_cores(monkeypatch):
    """Each of the two workers' DuckDB gets half of the cores, not all of them. (That the workers
    hold none of the caller's objects, whose destructors would run there without their threads,
    is tests/extract/test_pool_workers.py's.)"""
    monkeypatch.setattr(pool, "_one", _threads_given)
    seen = pool._on_pool(["a", "b", "c"], ["a", "b", "c"], False, 2, pool._Bar(False, 3, "test"), pool._as_is)
    assert set(seen) == {max(1, pool.usable_cores() // 2)}


# ---------------------------------------------------------------- memory limit and spilling


@pytest.fixture(scope="module")
def mid_report(tmp_path_factory):
    """605k rows (40 MB): DuckDB's copy of its tables does not fit in 40 MB."""
    out = tmp_path_factory.mktemp("mid") / "mid.sqlite"
    _gen().generate(out, ranks=4, steps=4, layers=250, quiet=True)
    return out


class _InTurn:
    """ThreadPoolExecutor's stand-in: each job runs in the thread that asks for its result, then."""

    def __init__(self, *args, **kwargs):
        pass

    def submit(self, fn, *args):
        return _Later(fn, args)

    def shutdown(self, wait=True, **kwargs):
        pass


class _Later:
    def __init__(self, fn, args):
        self.fn, self.args, self.done = fn, args, []

    def result(self, timeout=None):
        if not self.done:
            self.done.append(self.fn(*self.args))
        return self.done[0]


def test_extract_spills_under_a_memory_limit_with_the_same_result(mid_report, tmp_path, monkeypatch):
    """Under a limit its kernels do not fit in (ingest.nsys.reader.fits_in_memory), a report takes
    the DuckDB route: DuckDB's copy of the tables (reader._copy_tables) and the busy islands in
    SQL (busy.islands_in_duckdb), which spill; without one, the C scan where it is built.

    One query at a time, so that what is in memory together does not depend on the machine's
    load: DuckDB on one thread, and the islands, which share the database's memory limit, made
    when their result is asked for instead of on a thread of their own beside the other queries
    (on a busy machine the two met at their peaks, and the limit ran out)."""
    from nsyscomm.ingest.nsys import extract as nsys_extract

    free = nsys_extract.extract(mid_report)
    monkeypatch.setattr(nsys_extract, "ThreadPoolExecutor", _InTurn)
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv("NSYSCOMM_MEMORY_LIMIT", "40MB")
    monkeypatch.setenv("NSYSCOMM_TEMP_DIR", str(spill))
    spilled = []
    real = nsys_extract.open_report

    routes = []

    def spy(path, threads=None):  # when the report's tables have just been read
        opened = real(path, threads)
        spilled.extend(p.stat().st_size for p in spill.rglob("*") if p.is_file())
        routes.append(opened.compute)
        return opened

    real_islands = nsys_extract.islands_in_duckdb
    monkeypatch.setattr(nsys_extract, "open_report", spy)
    monkeypatch.setattr(nsys_extract, "islands_in_duckdb", lambda con: routes.append("islands") or real_islands(con))
    limited = nsys_extract.extract(mid_report, threads=1)
    assert routes == [None, "islands"]
    # DuckDB wrote its tables out instead of failing (3-6 MB when the tables have just been read,
    # depending on the threads' timing; under 30 MB the extraction sometimes ran out of memory)
    assert sum(spilled) > 2e6
    _same(free, limited)
    assert not list(spill.iterdir())  # each database removed its spill folder on closing


def test_memory_limit_option_and_errors(mid_report, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from nsyscomm import duck
    from nsyscomm.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(duck.MEMORY_LIMIT_ENV, raising=False)
    before = dict(os.environ)
    run = CliRunner().invoke
    ok = run(main, ["summarize", str(mid_report), "--no-cache", "--format", "json", "--memory-limit", "50%"])
    assert ok.exit_code == 0, ok.output
    assert sum(r["calls"] for r in json.loads(ok.stdout)["ranks"]) == 4 * 4 * 250 * 5
    assert not (tmp_path / ".tmp").exists()  # DuckDB's default spill folder would be here
    bad = run(main, ["summarize", str(mid_report), "--no-cache", "--memory-limit", "lots"])
    assert bad.exit_code == 2 and "NSYSCOMM_MEMORY_LIMIT='lots' is not a memory size" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    tight = run(main, ["summarize", str(mid_report), "--no-cache", "--memory-limit", "8MB"])
    assert tight.exit_code == 2, tight.output
    assert tight.stderr.startswith("nsyscomm: error: out of memory (Out of Memory Error")
    assert "--memory-limit" in tight.stderr and len(tight.stderr.strip().splitlines()) == 1
    assert dict(os.environ) == before  # the option applied to the run, not to the process after it


_WHOLE_S: dict[str, float] = {}


def _summarize_cmd(report) -> list[str]:
    import sys

    # a library's deprecation warning on stderr is not what this test reads; the program as its
    # console script runs it (nsyscomm.__main__)
    return [
        sys.executable,
        "-W",
        "ignore::DeprecationWarning",
        "-m",
        "nsyscomm",
        "summarize",
        str(report),
        "--no-cache",
    ]


@pytest.mark.parametrize("fraction", [0.2, 0.4])
def test_ctrl_c_stops_a_summarize_at_once_with_one_line(mid_report, fraction):
    """Ctrl-C early (during the imports, the report being read meanwhile) and later (during the
    extraction): status 130, one line, and no waiting for the background reading to finish.
    The signal comes at a fraction of this machine's own uninterrupted run of the same command,
    so a fast machine interrupts it as surely as a slow one (it never ends before the signal)."""
    import signal
    import subprocess
    import time

    if str(mid_report) not in _WHOLE_S:
        t0 = time.perf_counter()
        subprocess.run(_summarize_cmd(mid_report), capture_output=True, check=True, timeout=600)
        _WHOLE_S[str(mid_report)] = time.perf_counter() - t0
    whole = _WHOLE_S[str(mid_report)]
    p = subprocess.Popen(_summarize_cmd(mid_report), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(fraction * whole)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err.strip()) == (130, "nsyscomm: interrupted"), (whole, p.returncode, err[-2000:])


# after the program's first instruction: seconds from its import of click (its first import after
# Ctrl-C's handler is in place) to the signal, across the start-up: click, the command's modules,
# DuckDB, the head start, the imports beside the reading, the extraction's start
_EARLY_S = (0.0, 0.003, 0.01, 0.02, 0.04, 0.07, 0.11, 0.17)


def test_ctrl_c_from_the_first_instruction_on_is_one_line_and_130(mid_report):
    """Ctrl-C at any moment of a summarize's start, where an interrupt could be lost or take
    another name (a C extension's ImportError, DuckDB's RuntimeError swallowed by the head start,
    a traceback from the middle of an import): always status 130 and one line. The offsets count
    from the moment the program has imported click, which its stderr says under -X importtime, so
    that a loaded machine's slow start moves the signals with it; the last one comes while the
    imports still run, long before a run that reads 605k rows could end."""
    import signal
    import subprocess
    import time

    cmd = _summarize_cmd(mid_report)
    cmd[1:1] = ["-X", "importtime"]
    for offset in _EARLY_S:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert p.stderr is not None
        head = []
        for line in p.stderr:  # each module's line when it is imported; click's, then the signal
            head.append(line)
            if line.rsplit("|", 1)[-1].strip() == "click":
                break
        time.sleep(offset)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        said = [x for x in (*head, *err.splitlines()) if x.strip() and not x.startswith("import time:")]
        assert (p.returncode, said) == (130, ["nsyscomm: interrupted"]), (offset, p.returncode, said[-20:])
        assert out == "", offset
