"""Bus-bandwidth factors against their definition in nccl-tests, in the table and end to end.

The expected factors are written here from nccl-tests' doc/PERFORMANCE.md and the factor each of
its src/*.cu tests computes (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md),
never read from nsyscomm.busbw; docs/architecture.md ("Message size and bus bandwidth") states the
same table.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nsyscomm import busbw, nvtx_format
from nsyscomm.cli import main
from nsyscomm.synth import Report, write_sqlite
from nsyscomm.synth.truth import NCCL_TESTS_BUSBW

# op -> factor for a communicator of n ranks, as nccl-tests defines it: the synthetic truth's table,
# written from nccl-tests' definitions and independent of nsyscomm.busbw
NCCL_TESTS = NCCL_TESTS_BUSBW


@pytest.mark.parametrize("op", busbw.OPS)
def test_factor_table_is_nccl_tests(op):
    for n in range(1, 17):
        want = NCCL_TESTS[op](n) if op in NCCL_TESTS else None
        got = busbw.busbw_factor(op, n)
        assert got == pytest.approx(want) if want is not None else got is None, (op, n, got, want)


def test_every_op_has_a_definition_and_no_size_no_factor():
    assert set(busbw.OPS) == set(NCCL_TESTS) | {"barrier"}
    assert {op for op, _ in busbw.factor_rows()} == set(busbw.OPS)
    for op in busbw.OPS:
        assert busbw.busbw_factor(op, None) is None and busbw.busbw_factor(op, 0) is None
    assert busbw.busbw_factor("no_such_op", 4) is None


# (op, bytes, latency ns, group ranks); every rank of a group starts together, the fastest takes
# the latency and each later rank 1 us more, so a collective's latency is exactly the given one
PLAN = [
    ("all_reduce", 8_000_000, 400_000, (0, 1, 2, 3)),
    ("all_gather", 4_000_000, 250_000, (0, 1, 2, 3)),
    ("reduce_scatter", 4_000_000, 200_000, (0, 1, 2, 3)),
    ("all_to_all", 6_000_000, 300_000, (0, 1, 2, 3)),
    ("gather", 2_000_000, 160_000, (0, 1, 2, 3)),
    ("scatter", 2_000_000, 125_000, (0, 1, 2, 3)),
    ("reduce", 3_000_000, 150_000, (0, 1, 2, 3)),
    ("broadcast", 1_000_000, 100_000, (0, 1, 2, 3)),
    # a group of two inside a world of four: the factor takes the group's size, not the world's
    ("all_reduce", 5_000_000, 250_000, (0, 1)),
]


def _job(path):
    rep = Report(path.name, cuda=False)
    procs = [rep.process(300 + r, "python3") for r in range(4)]
    for r, p in enumerate(procs):
        rep.mark(p, p.pid, 1_000, registered=nvtx_format.format_rank_marker(r, r, 4, "h"), domain=1)
    seq: dict = {}
    t = 1_000_000
    for op, nbytes, lat, granks in PLAN:
        pg = "0" if len(granks) == 4 else "1"
        for i, r in enumerate(granks):
            s = seq.setdefault((r, pg), 0)
            seq[(r, pg)] += 1
            msg = nvtx_format.format_collective(
                op,
                api=op,
                bytes=nbytes,
                dtype="float32",
                numel=nbytes // 4,
                pg=pg,
                gsize=len(granks),
                granks=granks if pg != "0" else (),
                seq=s,
                caller="bw.py:1 main",
            )
            p = procs[r]
            rep.range(p, p.pid, t, t + lat + i * 1_000, registered=msg, domain=1)
        t += 2_000_000
    write_sqlite(rep, path, seed=0)
    return path


def test_busbw_end_to_end_every_family(tmp_path):
    """The JSON's busbw_GBps is bytes / latency x the nccl-tests factor of the group's size, for
    every family that moves data (gather, scatter and reduce included)."""
    path = _job(tmp_path / "bw.sqlite")
    r = CliRunner().invoke(main, ["summarize", str(path), "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    rows = {(s["op"], s["bytes"]): s for s in json.loads(r.stdout)["summary"]}
    assert len(rows) == len(PLAN)
    for op, nbytes, lat, granks in PLAN:
        s = rows[(op, nbytes)]
        assert s["group_size"] == len(granks) and s["count"] == 1 and s["calls"] == len(granks)
        algbw = nbytes / lat  # bytes per ns = GB/s
        assert s["algbw_GBps"] == pytest.approx(algbw, rel=1e-6), op
        assert s["busbw_GBps"] == pytest.approx(algbw * NCCL_TESTS[op](len(granks)), rel=1e-6), (op, granks)


def test_an_unknown_factor_kind_is_an_error(monkeypatch):
    """A misspelt kind in the table must not pass for another family's factor."""
    monkeypatch.setitem(busbw._FACTOR_KIND, "all_to_all", "nm-1")
    with pytest.raises(ValueError, match=r"^busbw: unknown factor kind 'nm-1' for all_to_all$"):
        busbw.busbw_factor("all_to_all", 4)
