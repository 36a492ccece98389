"""NCCL Inspector's Prometheus metrics (.prom files): read into one table of buckets, shown where
a folder holds nothing else; each bucket's figures checked against the calls it was made of."""

from __future__ import annotations

import math

import pytest

import nsyscomm
from nsyscomm.synth import gen_ddp_4rank
from nsyscomm.synth.inspector import calls_from_reports, prom_text, size_bucket


def test_size_buckets_as_the_plugin_labels_them():
    assert [size_bucket(b) for b in (0, 1000, 8192, 1 << 20, 10813440, 141 << 20)] == [
        "0B",
        "1000-1001B",
        "8-9KB",
        "1-2MB",
        "10-11MB",
        "141-142MB",
    ]


def test_a_folder_of_metrics_files_gives_the_bucket_table(tmp_path):
    calls = calls_from_reports(gen_ddp_4rank(1))
    for rank in range(4):
        mine = [c for c in calls if c.truth["rank"] == rank]
        (tmp_path / f"nccl_inspector_metrics_GPU-{rank}.prom").write_text(prom_text(mine))
    res = nsyscomm.load(tmp_path, cache=False)
    assert res.n_calls == 0
    b = res.inspector_buckets.set_index(["op", "message_size"])
    assert sorted(b.index) == [("all_reduce", "10-11MB"), ("all_reduce", "25-26MB"), ("broadcast", "1-2MB")]
    assert set(b["gpus"]) == {4} and set(b["algo_proto"]) == {"RING_SIMPLE"}
    # the 25 MiB all_reduces: 10 per rank; their mean execution time over all 40, from the calls
    big = [c for c in calls if c.func == "AllReduce" and c.msg_bytes == 26214400]
    mean_us = sum((c.kernel[1] - c.kernel[0]) // 1000 for c in big) / len(big)
    assert b.loc[("all_reduce", "25-26MB"), "exec_us"] == (
        pytest.approx(mean_us, rel=1e-5)  # each file's mean is printed to 6 digits
    )
    # busbw: the geometric mean over the 4 GPUs of each GPU's geometric mean, 2(n-1)/n x S / t
    per_gpu = []
    for rank in range(4):
        bws = [26214400 / ((c.kernel[1] - c.kernel[0]) // 1000 * 1e3) * 1.5 for c in big if c.truth["rank"] == rank]
        per_gpu.append(math.exp(sum(map(math.log, bws)) / len(bws)))
    gm = math.exp(sum(map(math.log, per_gpu)) / 4)
    assert b.loc[("all_reduce", "25-26MB"), "busbw_gbs"] == pytest.approx(gm, rel=1e-5)
    assert b.loc[("all_reduce", "25-26MB"), "min_busbw_gbs"] == pytest.approx(min(per_gpu), rel=1e-5)


def test_the_text_summary_shows_the_table(tmp_path):
    from click.testing import CliRunner

    from nsyscomm.cli import main

    calls = calls_from_reports(gen_ddp_4rank(1))
    (tmp_path / "nccl_inspector_metrics_GPU-0.prom").write_text(prom_text([c for c in calls if c.truth["rank"] == 0]))
    r = CliRunner().invoke(main, ["summarize", str(tmp_path), "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "NCCL Inspector metrics" in r.output and "25-26MB" in r.output
