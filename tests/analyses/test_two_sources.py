"""One job given as two sources (an nsys export and the NCCL Inspector dumps of the same calls,
from one generated truth): read together, the first is the summary and the lines say where the
second disagrees in counts, sizes and order -- each disagreement made on purpose here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nsyscomm
from nsyscomm.synth import gen_ddp_4rank, gen_fsdp_8rank, write_sqlite
from nsyscomm.synth.inspector import Call, calls_from_reports, write_dumps


def _job(tmp_path: Path, gen, seed: int, change=None) -> nsyscomm.Result:
    reps = gen(seed)
    write_sqlite(reps[0], tmp_path / "job.sqlite", seed)
    calls = calls_from_reports(reps)
    write_dumps(tmp_path / "inspector", change(calls) if change else calls)
    return nsyscomm.load([tmp_path / "job.sqlite", tmp_path / "inspector"], cache=False)


def _lines(res) -> list[str]:
    start = next(i for i, w in enumerate(res.warnings) if "describe the same job" in w)
    return res.warnings[start:]


def test_agreeing_sources_say_so(tmp_path):
    res = _job(tmp_path, gen_ddp_4rank, 1)
    assert _lines(res) == [
        "the nsys SQLite export and the NCCL Inspector dumps describe the same job and agree on all 64 call(s) in op, size and order"
    ]
    assert res.reports == ["job.sqlite"]  # the summary is the first source's


def test_calls_one_source_lacks_are_counted_per_rank(tmp_path):
    """FSDP's 4 KiB all_reduces are under the plugin's minimum size: 3 per rank, on all 8."""
    lines = _lines(_job(tmp_path, gen_fsdp_8rank, 2))
    assert "144 call(s) agree" in lines[0]
    counts = [w for w in lines if w.startswith("  counts:")]
    assert counts == [
        f"  counts: rank {r} all_reduce 4.00 KiB: 3 in the nsys SQLite export, 0 in the NCCL Inspector dumps"
        for r in range(8)
    ]


def test_calls_in_another_order_are_named(tmp_path):
    """Rank 1's dump holds its broadcast (1 MiB) and first all_reduce (25 MiB) in swapped times."""

    def swap(calls: list[Call]) -> list[Call]:
        mine = [c for c in calls if c.truth["rank"] == 1]
        b = next(c for c in mine if c.func == "Broadcast")
        a = next(c for c in mine if c.func == "AllReduce" and c.sn == 0)
        times = lambda c: dict(start_ns=c.start_ns, stop_ns=c.stop_ns, kernel=c.kernel)  # noqa: E731
        new = {id(b): dataclasses.replace(b, **times(a)), id(a): dataclasses.replace(a, **times(b))}
        return [new.get(id(c), c) for c in calls]

    lines = _lines(_job(tmp_path, gen_ddp_4rank, 1, swap))
    assert [w for w in lines if w.startswith("  order:")] == [
        "  order: rank 1: call 1 is broadcast 1.00 MiB in the nsys SQLite export, all_reduce 25.00 MiB in the NCCL Inspector dumps"
    ]
    assert not any(w.startswith("  counts:") for w in lines)
