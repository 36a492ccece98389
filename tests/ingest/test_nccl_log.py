"""NCCL_DEBUG=INFO logs and nccl-tests tables: generated logs with exact expectations, and the
real logs in ../shared/real/nccl-logs when present."""

from __future__ import annotations

import pandas as pd
import pytest

from nsyscomm.analyses import vs_reference
from nsyscomm.errors import InputError
from nsyscomm.ingest import nccl_log
from tests import conftest

REAL = conftest.REAL / "nccl-logs"
need_real = pytest.mark.skipif(not REAL.is_dir(), reason="shared/real/nccl-logs is absent")

LOG = """\
nodeA:11:11 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>
nodeA:11:11 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
nodeA:11:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
nodeA:11:40 [0] NCCL INFO Using network IB
nodeA:12:41 [1] NCCL INFO Using network IB
nodeA:11:40 [0] NCCL INFO TUNER/Plugin: Using tuner plugin example-tuner
nodeA:11:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
nodeA:11:40 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read
nodeA:12:41 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA
nodeB:21:50 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA
nodeB:21:50 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via SHM/direct/direct
nodeA:11:40 [0] NCCL INFO 8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer
nodeA:11:40 [0] NCCL INFO ncclCommInitRank comm 0x55aa rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE
nodeA:12:41 [1] NCCL INFO ncclCommInitRank comm 0x55bb rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 2000 commId 0xabc - Init COMPLETE
nodeB:21:50 [0] NCCL INFO ncclCommInitRank comm 0x66aa rank 2 nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE
nodeB:22:51 [1] NCCL INFO ncclCommInitRank comm 0x66bb rank 3 nranks 4 cudaDev 1 nvmlDev 1 busId 2000 commId 0xabc - Init COMPLETE
"""

NCCL_TESTS = """\
+ srun all_gather_perf -b 1K -e 4K -f 2
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid     11 on      nodeA device  0 [0x01] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid     12 on      nodeB device  0 [0x01] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
[1,0]<stdout>:        1024           128     float    none      -1[1,0]<stdout>:    10.00    0.10    0.05      0[1,0]<stdout>:     9.00    0.11    0.06      0
        2048           256     float    none      -1    11.00    0.19    0.09      0    10.00    0.20    0.10      0
0:         4096           512     float    none      -1    12.00    0.34    0.17      0      N/A     N/A     N/A    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.1033
#
"""


def test_parse_info_log(tmp_path):
    p = tmp_path / "nccl.log"
    p.write_text(LOG)
    r = nccl_log.parse(p)
    assert (r.version, r.cuda) == ("2.21.5", "12.4")
    assert r.nranks == 4 and r.ranks == [0, 1, 2, 3]
    assert r.nodes == 2 and r.hosts == ["nodeA", "nodeB"]
    assert r.network == "IB" and r.gdr is True
    assert r.transports == {"P2P/IPC/read": 2, "NET/IB": 2, "SHM/direct/direct": 1}
    assert r.transport_kinds == ["NET", "P2P", "SHM"]
    assert r.channels == {"coll": 8, "p2p": 8, "p2p_per_peer": 2, "collnet": 8, "nvls": 0}
    assert r.nvls is False
    assert r.tuner == "example-tuner"
    assert r.communicators == [{"comm_id": "0xabc", "nranks": 4, "ranks_seen": 4}]
    assert r.nccl_tests == [] and r.warnings == []
    d = r.to_dict()
    assert d["version"] == "2.21.5" and isinstance(d["transports"], dict)


def test_reference_curve_tags_and_na(tmp_path):
    p = tmp_path / "ag.out"
    p.write_text(NCCL_TESTS)
    c = nccl_log.reference_curve(p)
    assert list(c["op"]) == ["all_gather"] * 3  # from the binary name in the command line
    assert list(c["bytes"]) == [1024, 2048, 4096]
    assert list(c["busbw_GBps"]) == [0.05, 0.09, 0.17]
    assert list(c["algbw_GBps"]) == [0.10, 0.19, 0.34]
    assert list(c["time_us"]) == [10.0, 11.0, 12.0]
    assert c["busbw_GBps_inplace"].isna().tolist() == [False, False, True]
    assert set(c["ranks"]) == {2} and set(c["avg_busbw_GBps"]) == {0.1033}
    r = nccl_log.parse(p)
    assert r.nccl_tests == [
        {
            "run": 0,
            "op": "all_gather",
            "ranks": 2,
            "dtype": "float",
            "sizes": 3,
            "min_bytes": 1024,
            "max_bytes": 4096,
            "avg_busbw_GBps": 0.1033,
            "peak_busbw_GBps": 0.17,
            "peak_at_bytes": 4096,
        }
    ]
    assert r.nodes == 2 and r.gpus == ["NVIDIA H100 80GB HBM3"]
    assert any("without NCCL INFO" in w for w in r.warnings)
    # op override and the table-only guess
    assert set(nccl_log.reference_curve(p, op="all_to_all")["op"]) == {"all_to_all"}
    q = tmp_path / "plain.out"
    q.write_text(NCCL_TESTS.replace("+ srun all_gather_perf -b 1K -e 4K -f 2\n", "").replace("none", " sum"))
    assert set(nccl_log.reference_curve(q)["op"]) == {"all_reduce"}


def test_compare_interpolates(tmp_path):
    p = tmp_path / "ag.out"
    p.write_text(NCCL_TESTS)
    curve = nccl_log.reference_curve(p)
    s = pd.DataFrame(
        {
            "op": ["all_gather", "all_gather", "all_reduce"],
            "bytes": [2048, 1448, 2048],
            "busbw_GBps": [0.045, 0.07, 1.0],
        }
    )
    out = vs_reference.compare(s, curve)
    assert out["ref_busbw_GBps"].iloc[0] == pytest.approx(0.09)
    assert out["busbw_vs_ref"].iloc[0] == pytest.approx(0.5)
    assert 0.05 < out["ref_busbw_GBps"].iloc[1] < 0.09
    assert pd.isna(out["ref_busbw_GBps"].iloc[2])


def test_missing_file(tmp_path):
    with pytest.raises(InputError):
        nccl_log.parse(tmp_path / "nope.log")


@need_real
def test_real_aws_p5_log():
    r = nccl_log.parse(REAL / "aws-p5-h100-16rank-nccl-debug-info.log")
    assert (r.version, r.cuda) == ("2.22.3", "12.2")
    assert r.nranks == 16 and r.ranks == list(range(16)) and r.nodes == 2
    assert r.network == "AWS Libfabric" and r.gdr is True
    assert r.transports == {"NET/AWS Libfabric": 512, "P2P/CUMEM": 448}
    assert r.transport_kinds == ["NET", "NVLS", "P2P"] and r.nvls
    assert r.channels["coll"] == 16 and r.channels["nvls"] == 16 and r.channels["p2p_per_peer"] == 2
    assert r.tuner == "internal"
    assert r.gpus == ["NVIDIA H100 80GB HBM3"]
    (t,) = r.nccl_tests
    assert t["op"] == "all_reduce" and t["ranks"] == 16 and t["sizes"] == 32
    assert (t["min_bytes"], t["max_bytes"]) == (8, 17179869184)
    assert t["avg_busbw_GBps"] == 124.584 and t["peak_busbw_GBps"] == 487.90
    c = nccl_log.reference_curve(REAL / "aws-p5-h100-16rank-nccl-debug-info.log")
    row = c[c["bytes"] == 1073741824].iloc[0]
    assert (row["time_us"], row["algbw_GBps"], row["busbw_GBps"]) == (4575.2, 234.69, 440.04)


@need_real
@pytest.mark.parametrize(
    "name,ranks,nodes,peak,avg",
    [
        ("job-n-00004-N-0001-142995.out", 4, 1, 339.04, 116.39),
        ("job-n-00008-N-0002-142996.out", 8, 2, 158.24, 42.784),
        ("job-n-00016-N-0004-142997.out", 16, 4, 92.50, 25.8822),
    ],
)
def test_real_alps_nccl_tests(name, ranks, nodes, peak, avg):
    r = nccl_log.parse(REAL / "alps-gh200" / name)
    assert r.version is None and r.nranks == ranks and r.nodes == nodes
    (t,) = r.nccl_tests
    assert t["op"] == "all_reduce" and t["ranks"] == ranks and t["sizes"] == 30
    assert t["peak_busbw_GBps"] == peak and t["avg_busbw_GBps"] == avg


def test_version_read_from_mpirun_tagged_bare_banner(tmp_path):
    # mpirun tags every line; the banner line carries no host:pid:tid prefix.
    log = tmp_path / "mpi.log"
    log.write_text(
        "[1,0]<stdout>:NCCL version 2.20.3+cuda12.2\n"
        "[1,0]<stdout>:node1:100:100 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
    )
    from nsyscomm.ingest import nccl_log

    out = nccl_log.parse(log)
    assert out.version == "2.20.3"
    assert out.cuda == "12.2"
