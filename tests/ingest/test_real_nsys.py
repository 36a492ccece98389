"""Conformance on real nsys exports of six nsys versions (../shared/real/nsys)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import nsyscomm
from nsyscomm.cli import main
from tests.conftest import REAL_NSYS, REAL_NSYS_NAMES, real_file, real_nsys_files, ro

REAL = real_nsys_files()


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "csv"])
def test_every_real_export_summarizes(path, fmt):
    r = CliRunner().invoke(main, ["summarize", str(path), "--format", fmt])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    if fmt == "json":
        doc = json.loads(r.output)
        assert doc["schema"] == 3
        assert set(doc) >= {"summary", "ranks", "skew", "warnings"}


@pytest.mark.parametrize(
    "name",
    [
        "nsys2025.1_1gpu_nvtx.sqlite",
        "nsys2023.3_no_cuda_no_nvtx.sqlite",
        "nsys2026.1_tiny.sqlite",
        "nsys2022.1_1gpu_schema2.9.sqlite",
        "nsys2026.2_2xH100_nonccl_window.sqlite",
    ],
)
def test_reports_without_collectives_say_so_in_one_line(name):
    path = real_file(f"nsys/{name}")
    r = CliRunner().invoke(main, ["summarize", str(path)])
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == f"No collective calls found in {name}."


def _kernel_ns_per_process(path):
    """Independent of nsyscomm: sum of NCCL kernel durations per process, straight from SQLite."""
    with ro(path) as con:
        return dict(
            con.execute("""
            SELECT (k.globalPid >> 24) & 16777215, sum(k."end" - k.start)
            FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value LIKE 'nccl%' GROUP BY 1""").fetchall()
        )


def test_h100_window_numbers(h100_window):
    res = nsyscomm.load(h100_window)
    c = res.collectives
    assert len(c) == 66
    assert sorted(c.groupby("rank").size().tolist()) == [33, 33]
    a2a = c[(c.op == "all_to_all") & (c.source == "torch_range")]
    assert len(a2a) == 64
    # the same counts with plain SQL on the export: NCCL kernels per process, and those whose
    # launch (same correlation id in the same process) is recorded
    with ro(h100_window) as con:
        per_proc = con.execute(
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value LIKE 'nccl%' GROUP BY k.globalPid"""
        ).fetchall()
        launched = con.execute(
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
            WHERE s.value LIKE 'nccl%' AND EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r
              WHERE r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24))"""
        ).fetchone()[0]
    assert sorted(n for (n,) in per_proc) == [33, 33] and launched == len(a2a)
    assert (a2a.api == "nccl:all_to_all").all()
    bare = c[c.source == "kernel_name"]
    assert len(bare) == 2 and bare.cpu_start.isna().all() and (bare.kernel == "ncclDevKernel_SendRecv").all()
    # each rank's comm time is the sum of its NCCL kernel durations
    per_pid = _kernel_ns_per_process(h100_window)
    ranks = res.ranks.set_index("rank")
    for pid, rank in c.groupby("pid")["rank"].first().items():
        assert ranks.loc[rank, "comm_ms"] == pytest.approx(per_pid[pid] / 1e6, rel=0, abs=1e-9)
    # process order gives the ranks: pid 144 -> 0, 145 -> 1 (no wrapper marker, no payload blobs)
    assert c.groupby("pid")["rank"].first().to_dict() == {144: 0, 145: 1}
    assert any("no launch call" in w for w in res.warnings)


def test_h100_join_is_process_aware(h100_window):
    """Correlation ids restart per process: a join on correlationId alone would pair kernels with
    other processes' launches. Every attributed call's launch is on the kernel's own process."""
    c = nsyscomm.load(h100_window).collectives
    launched = c[c.cpu_start.notna()]
    assert (launched.groupby("pid")["device"].nunique() == 1).all()
    assert launched.groupby("pid")["device"].first().to_dict() == {144: 0, 145: 1}


def test_input_file_is_not_modified(h100_window):
    import hashlib

    before = hashlib.sha256(h100_window.read_bytes()).hexdigest()
    mtime = h100_window.stat().st_mtime_ns
    _ = nsyscomm.load(h100_window).summary  # reads the report and runs the analyses
    assert hashlib.sha256(h100_window.read_bytes()).hexdigest() == before
    assert h100_window.stat().st_mtime_ns == mtime
    assert not list(h100_window.parent.glob(h100_window.name + "-*"))  # no -journal / -wal beside it


@pytest.mark.skipif(not REAL_NSYS.is_dir(), reason="../shared/real/nsys not present beside the checkout")
def test_real_data_list_is_complete():
    """Every export in ../shared/real/nsys is in the suite's list (and so in every test over it)."""
    assert sorted(p.name for p in REAL_NSYS.glob("*.sqlite")) == sorted(REAL_NSYS_NAMES)
