"""nsys GPU metrics: link throughput during collectives, against a recomputation in plain Python.

The bundled DDP sample gets GPU_METRICS / TARGET_INFO_GPU_METRICS tables in nsys's layout: link
counters (NVLink, PCIe) and one that is not a link (SMs Active, to be ignored), sampled every
50 us on each GPU (typeId's low byte) with values that change every sample.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from collections import defaultdict

from click.testing import CliRunner

from nsyscomm import api
from nsyscomm.cli import main

SAMPLE = api.sample_reports_dir() / "synthetic_ddp_4rank.sqlite"
METRICS = {
    1: "SMs Active [Throughput %]",
    10: "NVLink RX Responses User Data [Throughput %]",
    11: "PCIe TX Throughput [Throughput %]",
}
PERIOD = 50_000


def _value(metric_id: int, device: int, k: int) -> float:
    return float((k * 7 + device * 3 + metric_id) % 101)


def _with_metrics(tmp_path, devices=None):
    path = tmp_path / "ddp_gpu_metrics.sqlite"
    shutil.copy(SAMPLE, path)
    calls = api.load([path], cache=False).collectives
    devices = sorted(int(d) for d in calls["device"].dropna().unique()) if devices is None else devices
    end = int(calls["gpu_end"].max()) + 2 * PERIOD
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, "
        "typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)"
    )
    con.execute(
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, "
        "value INTEGER NOT NULL)"
    )
    for d in devices:
        type_id = (0x0B << 8) | d
        for mid, name in METRICS.items():
            con.execute("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)", (type_id, d, "GPU", mid, name))
        rows = [(k * PERIOD, type_id, mid, _value(mid, d, k)) for k in range(end // PERIOD + 1) for mid in METRICS]
        con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return path, calls


def _truth(calls) -> dict:
    """(op, bytes, metric) -> (calls, covered_ns, time-weighted mean, peak), sample k covering ((k-1)P, kP]."""
    acc = defaultdict(lambda: [set(), 0, 0.0, -math.inf])
    for c in calls.itertuples():
        if c.gpu_start != c.gpu_start or c.device != c.device:  # NaN: a call without GPU time
            continue
        for mid, name in METRICS.items():
            if mid == 1:
                continue
            for k in range(int(c.gpu_start) // PERIOD, int(c.gpu_end) // PERIOD + 2):
                ns = min(k * PERIOD, c.gpu_end) - max((k - 1) * PERIOD, c.gpu_start)
                if ns > 0:
                    a = acc[(c.op, int(c.bytes), name)]
                    a[0].add((c.report, c.pid, c.gpu_start))
                    a[1] += ns
                    a[2] += ns * _value(mid, int(c.device), k)
                    a[3] = max(a[3], _value(mid, int(c.device), k))
    return {k: (len(v[0]), v[1], v[2] / v[1], v[3]) for k, v in acc.items()}


def test_link_metrics_match_recomputation(tmp_path):
    path, calls = _with_metrics(tmp_path)
    got = api.load([path], cache=False).link_metrics
    want = _truth(calls)
    assert len(want) > 0 and set(got["metric"]) == {METRICS[10], METRICS[11]}  # SMs Active is not a link
    assert len(got) == len(want)
    for r in got.itertuples():
        n, covered, mean, peak = want[(r.op, int(r.bytes), r.metric)]
        assert int(r.calls) == n
        assert math.isclose(r.covered_ms * 1e6, covered, rel_tol=1e-12)
        assert math.isclose(r.avg_value, mean, rel_tol=1e-9)
        assert r.max_value == peak


def test_link_metrics_in_text_and_json(tmp_path):
    path, _ = _with_metrics(tmp_path)
    res = CliRunner().invoke(main, ["summarize", str(path), "--no-cache"])
    assert res.exit_code == 0, res.output
    assert "Link throughput during collectives" in res.output and "NVLink RX Responses User Data" in res.output
    res = CliRunner().invoke(main, ["summarize", str(path), "--no-cache", "--format", "json"])
    doc = json.loads(res.output)
    assert doc["schema"] == 3
    rows = doc["link_metrics"]
    assert rows and set(rows[0]) == {
        "op",
        "bytes",
        "metric",
        "calls",
        "devices",
        "covered_ms",
        "avg_value",
        "max_value",
    }
    res = CliRunner().invoke(main, ["summarize", str(path), "--no-cache", "--format", "markdown"])
    assert "## Link throughput during collectives" in res.output and "PCIe TX Throughput" in res.output
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(path), "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert 'id="links"' in out.read_text() and "NVLink RX Responses User Data" in out.read_text()


def test_metrics_of_other_gpus_are_not_matched(tmp_path):
    path, _ = _with_metrics(tmp_path, devices=[7])
    r = api.load([path], cache=False)
    assert r.link_metrics.empty
    assert any("sampled on GPU(s) [7]" in w for w in r.warnings)


def test_no_gpu_metrics_no_section():
    r = api.load([SAMPLE], cache=False)
    assert r.link_metrics.empty
    res = CliRunner().invoke(main, ["summarize", str(SAMPLE), "--no-cache"])
    assert "Link throughput" not in res.output
