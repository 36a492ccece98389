"""Tests of the synthetic report generator itself (nsyscomm.synth)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from nsyscomm import nvtx_format, synth
from tests.conftest import ROOT

REPO = ROOT
SAMPLES_DIR = REPO / "sample_reports"
REAL_DIR = Path(os.environ.get("NSYSCOMM_REAL_DIR", REPO.parent / "shared" / "real" / "nsys"))
REAL_325 = REAL_DIR / "nsys2026.2_2xH100_nccl_window.sqlite"  # nsys 2026.2.1, export schema 3.25.0


def _reports(outdir: Path, name: str) -> list[Path]:
    folder = outdir / name
    if folder.is_dir():
        return sorted(folder.glob("*.sqlite"))
    return [outdir / f"{name}.sqlite"]


def _dump(path: Path) -> dict:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}
    finally:
        con.close()


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    truths = synth.generate_all(out)
    return out, truths


# --- determinism ------------------------------------------------------------------------


def test_two_generations_identical(generated, tmp_path):
    out1, _ = generated
    out2 = tmp_path / "again"
    synth.generate_all(out2)
    for name in synth.SAMPLES:
        t1 = (out1 / f"{name}.truth.json").read_bytes()
        t2 = (out2 / f"{name}.truth.json").read_bytes()
        assert t1 == t2, name
        r1, r2 = _reports(out1, name), _reports(out2, name)
        assert [p.name for p in r1] == [p.name for p in r2]
        for a, b in zip(r1, r2):
            assert _dump(a) == _dump(b), a.name


def test_committed_samples_are_current(generated):
    """sample_reports/ holds exactly what the generator produces now."""
    out, _ = generated
    for name in synth.SAMPLES:
        committed = SAMPLES_DIR / f"{name}.truth.json"
        if not committed.exists():
            pytest.skip(f"{committed} not generated; run python -m nsyscomm.synth sample_reports")
        assert committed.read_bytes() == (out / f"{name}.truth.json").read_bytes(), name
        for a, b in zip(_reports(SAMPLES_DIR, name), _reports(out, name)):
            assert _dump(a) == _dump(b), a.name


def test_truth_json_is_sorted_and_integer_times(generated):
    out, truths = generated
    for name, truth in truths.items():
        text = (out / f"{name}.truth.json").read_text()
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=1) + "\n"
        for row in truth["collectives"]:
            for k in ("cpu_start", "cpu_end", "gpu_start", "gpu_end", "duration_ns", "latency_ns", "wait_ns"):
                assert row[k] is None or isinstance(row[k], int), (name, k)
        keys = [synth.summary_key(r) for r in truth["by_caller"]]
        assert keys == sorted(keys)
        assert truth["collectives_count"] == len(truth["collectives"])


def test_reports_are_small(generated):
    out, _ = generated
    for name in synth.SAMPLES:
        for p in _reports(out, name):
            assert p.stat().st_size < 1_000_000, p


# --- schema -----------------------------------------------------------------------------


def _columns(con, table):
    return [(r[1], r[2].upper()) for r in con.execute(f'PRAGMA table_info("{table}")')]


@pytest.mark.skipif(not REAL_325.exists(), reason=f"real nsys 2026.2 export not present at {REAL_325}")
def test_schema_matches_real_nsys(generated):
    out, _ = generated
    real = _ro(REAL_325)
    real_tables = {r[0] for r in real.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    checked = set()
    for name in synth.SAMPLES:
        for p in _reports(out, name):
            con = _ro(p)
            for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                assert t in real_tables, f"{t} is not an nsys 2026.2 table"
                assert _columns(con, t) == _columns(real, t), t
                checked.add(t)
            con.close()
    assert {
        "StringIds",
        "NVTX_EVENTS",
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "PROCESSES",
        "ThreadNames",
        "TARGET_INFO_SESSION_START_TIME",
        "META_DATA_EXPORT",
    } <= checked


@pytest.mark.skipif(not REAL_DIR.is_dir(), reason=f"real nsys exports not present at {REAL_DIR}")
def test_column_names_exist_in_some_real_file():
    """Each generated table's columns match the same table in at least one real export."""
    seen = {}
    for f in sorted(REAL_DIR.glob("*.sqlite")):
        con = _ro(f)
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            seen.setdefault(t, []).append([r[0] for r in _columns(con, t)])
        con.close()
    for t in synth.TABLES:
        if t not in seen:
            continue
        mine = [c.split()[0] for c in synth.TABLES[t]]
        assert mine in seen[t], t


# --- shape of the data ------------------------------------------------------------------


def test_global_ids_and_correlation_restart(generated):
    out, _ = generated
    con = _ro(out / "synthetic_ddp_4rank.sqlite")
    for gpid, pid in con.execute("SELECT globalPid, pid FROM PROCESSES"):
        assert (gpid >> 24) & 0xFFFFFF == pid and gpid & 0xFFFFFF == 0 and gpid >> 48 == 1
    # the same correlationId in several processes: a join on correlationId alone double counts
    n = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                       ON r.correlationId = k.correlationId""").fetchone()[0]
    good = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
                          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)""").fetchone()[
        0
    ]
    kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert good == kernels and n > 2 * kernels
    assert (
        con.execute("SELECT min(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid >> 24").fetchall()
        == [(1,)] * 4
    )


def test_rows_not_in_time_order(generated):
    out, _ = generated
    con = _ro(out / "synthetic_ddp_4rank.sqlite")
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        starts = [r[0] for r in con.execute(f"SELECT start FROM {t} ORDER BY rowid")]
        assert starts != sorted(starts), t


def test_wrapper_ranges_registered_and_enclose_launch(generated):
    out, _ = generated
    con = _ro(out / "synthetic_ddp_4rank.sqlite")
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType=75 AND text='nsyscomm'").fetchone()[0] == 4
    rows = con.execute("""SELECT n.start, n.end, n.globalTid, n.text, s.value FROM NVTX_EVENTS n
                          JOIN StringIds s ON s.id = n.textId WHERE s.value LIKE 'nsyscomm:%'""").fetchall()
    assert rows and all(r[3] is None and r[0] < r[1] for r in rows)
    n_launch = 0
    for start, end, gtid, _, msg in rows:
        assert msg == nvtx_format.format_collective(**_args(nvtx_format.parse(msg)))
        n_launch += con.execute(
            """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                 AND (k.globalPid >> 24) = (r.globalTid >> 24)
            JOIN StringIds s ON s.id = k.shortName
            WHERE r.globalTid = ? AND r.start >= ? AND r.end <= ? AND s.value LIKE 'nccl%'""",
            (gtid, start, end),
        ).fetchone()[0]
    assert n_launch == len(rows)


def _args(f):
    return dict(
        op=f["kind"].split(":", 1)[1],
        api=f["api"],
        bytes=int(f["bytes"]),
        dtype=f["dtype"],
        numel=f["numel"],
        pg=f["pg"],
        gsize=f["gsize"],
        granks=f["granks"],
        seq=int(f["seq"]),
        async_op=f["async"] == "1",
        step=f["step"],
        caller=f["caller"],
    )


def test_ddp_truth_straggler_and_waits(generated):
    _, truths = generated
    t = truths["synthetic_ddp_4rank"]
    assert t["skew"]["straggler_rank"] == 2
    ranks = {r["rank"]: r for r in t["ranks"]}
    assert set(ranks) == {0, 1, 2, 3}
    assert all(ranks[2]["wait_ns"] < ranks[r]["wait_ns"] for r in (0, 1, 3))
    assert all(0 < r["exposed_ns"] < r["comm_ns"] for r in ranks.values())
    assert {(s["op"], s["bytes"]) for s in t["summary"]} == {
        ("broadcast", 1048576),
        ("all_reduce", 26214400),
        ("all_reduce", 10813440),
    }


def test_gloo_has_no_cupti(generated):
    out, truths = generated
    con = _ro(out / "synthetic_gloo_cpu.sqlite")
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not any(t.startswith("CUPTI") for t in tables)
    t = truths["synthetic_gloo_cpu"]
    assert all(r["gpu_start"] is None and r["duration_ns"] == r["cpu_end"] - r["cpu_start"] for r in t["collectives"])
    assert {r["op"] for r in t["collectives"]} == {"all_reduce", "broadcast", "all_gather", "barrier", "send", "recv"}


def test_fsdp_groups(generated):
    _, truths = generated
    t = truths["synthetic_fsdp_8rank"]
    for r in t["collectives"]:
        if r["op"] in ("all_gather", "reduce_scatter"):
            assert r["group"] == ("1" if r["rank"] < 4 else "2") and r["group_size"] == 4
            assert r["group_ranks"] == ("0,1,2,3" if r["rank"] < 4 else "4,5,6,7")
            assert r["bytes"] == 16777216 and r["dtype"] == "bfloat16"
        else:
            assert r["op"] == "all_reduce" and r["group"] == "0" and r["group_size"] == 8


def test_nowrapper_traps(generated):
    out, truths = generated
    n0, n1 = _reports(out, "synthetic_nowrapper_2node")
    p0 = _ro(n0).execute("SELECT globalPid FROM PROCESSES ORDER BY pid").fetchall()
    p1 = _ro(n1).execute("SELECT globalPid FROM PROCESSES ORDER BY pid").fetchall()
    assert p0 == p1  # same pids and globalPids on both nodes: the report name is part of the key
    t = truths["synthetic_nowrapper_2node"]
    src = [(r["op"], r["source"]) for r in t["collectives"]]
    assert src.count(("all_reduce", "kernel_name")) == 1
    assert all(r["group_size"] == 4 and r["bytes"] is None and r["group"] is None for r in t["collectives"])
    assert {r["op"] for r in t["collectives"]} == {"all_reduce", "all_to_all"}
    # the SendRecv launch lies inside ncclGroupEnd and not inside any ncclSend/ncclRecv
    for path in (n0, n1):
        con = _ro(path)
        launches = con.execute("""SELECT r.globalTid, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r
            JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
                 AND (k.globalPid >> 24) = (r.globalTid >> 24)
            JOIN StringIds s ON s.id = k.shortName WHERE s.value = 'ncclDevKernel_SendRecv'""").fetchall()
        assert len(launches) == 6
        for gtid, s, e in launches:
            inside = {
                row[0]
                for row in con.execute(
                    """SELECT coalesce(n.text, v.value) FROM NVTX_EVENTS n
                LEFT JOIN StringIds v ON v.id = n.textId
                WHERE n.globalTid = ? AND n.start <= ? AND n.end >= ?""",
                    (gtid, s, e),
                )
            }
            assert "ncclGroupEnd" in inside and not inside & {"ncclSend", "ncclRecv"}
            assert any(x.startswith("nccl:all_to_all, op_id = ") for x in inside)
        # one NCCL kernel whose correlationId matches no launch in its process (node1 only)
        orphans = con.execute("""SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' AND NOT EXISTS (
              SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId
                AND (r.globalTid >> 24) = (k.globalPid >> 24))""").fetchone()[0]
        assert orphans == (1 if path.name == "node1.sqlite" else 0)


def test_kernel_name_parsing():
    p = synth.parse_kernel_name
    assert p("ncclKernel_AllReduce_RING_LL_Sum_float") == {
        "op": "all_reduce",
        "algo": "RING",
        "proto": "LL",
        "dtype": "float32",
    }
    assert p("ncclDevKernel_AllReduce_Sum_f32_TREE_LL128")["proto"] == "LL128"
    assert p("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL")["dtype"] == "bfloat16"
    assert p("ncclDevKernel_SendRecv") == {"op": "send", "algo": None, "proto": None, "dtype": None}


def test_exposed_interval_arithmetic():
    assert synth.minus_len([(0, 10), (5, 20)], [(2, 4), (15, 30)]) == 20 - 2 - 5
    assert synth.minus_len([(0, 10)], []) == 10
