"""Kineto (PyTorch profiler) traces of the newer formats' hostile corpus (tests/support/hostile_newer.py):
wrong types where the reader keys its tables, numbers past 64 bits, and small files that inflate
into gigabytes or into millions of kept events."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

from tests.support.hostile_corpus import kineto_trace
from tests.support.hostile_newer import ERROR, OK, READ, case

_KINETO_READ = READ  # export needs training steps, which a profiler trace does not record
# a Kineto bomb is refused while the trace is read, the same for every command: the heavy ones
# (each seconds of parsing before the refusal) run two commands, one per view family
_KINETO_HEAVY = ("summarize", "json")


def _kineto(d: Path, trace: dict | str, name: str = "rank0.json") -> list[str]:
    p = d / name
    p.write_text(trace if isinstance(trace, str) else json.dumps(trace))
    return [str(p)]


@case("kineto", "kineto_valid", OK, _KINETO_READ)
def _k_valid(d: Path) -> list[str]:
    return _kineto(d, kineto_trace())


for _label, _dist in (
    ("dist_list", [0, 2]),
    ("dist_string", "rank 0"),
    ("rank_infinite", {"rank": float("inf"), "world_size": 2}),
    ("rank_huge", {"rank": 10**30, "world_size": 2}),
    ("rank_negative", {"rank": -3, "world_size": 2}),
    ("world_string", {"rank": 0, "world_size": "two"}),
):
    case("kineto", f"kineto_{_label}", ERROR, _KINETO_READ)(
        lambda d, _dist=_dist: _kineto(d, {**kineto_trace(), "distributedInfo": _dist})
    )


def _corr(value) -> Callable[[Path], list[str]]:
    def build(d: Path) -> list[str]:
        t = kineto_trace()
        t["traceEvents"][2]["args"]["correlation"] = value
        t["traceEvents"][3]["args"]["correlation"] = value
        return _kineto(d, t)

    return build


case("kineto", "kineto_correlation_list", ERROR, _KINETO_READ)(_corr([7]))
case("kineto", "kineto_correlation_object", ERROR, _KINETO_READ)(_corr({"a": 7}))


@case("kineto", "kineto_pid_huge", ERROR, _KINETO_READ)
def _k_pid(d: Path) -> list[str]:
    t = kineto_trace()
    for e in t["traceEvents"][:3]:
        e["pid"] = 10**30
    return _kineto(d, t)


@case("kineto", "kineto_nelems_overflow", ERROR, _KINETO_READ)
def _k_nelems(d: Path) -> list[str]:
    """Message counts in range one by one, their size in bytes past 64 bits."""
    t = kineto_trace()
    for e in (t["traceEvents"][0], t["traceEvents"][3]):
        e["args"]["In msg nelems"] = e["args"]["Out msg nelems"] = 1 << 62
    return _kineto(d, t)


def gzip_repeat(path: Path, head: bytes, block: bytes, times: int, tail: bytes) -> Path:
    """A gzip file of head + block x times + tail, each piece compressed once: the block's
    deflate output ends at a full flush (no back-references past it), so it repeats as is."""
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    h = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    b = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    t = c.compress(tail) + c.flush()
    crc = zlib.crc32(head)
    for _ in range(times):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = (len(head) + len(block) * times + len(tail)) & 0xFFFFFFFF
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + h)
        for _ in range(times):
            f.write(b)
        f.write(t + struct.pack("<II", crc, size))
    return path


@case("kineto", "kineto_gzip_one_string", ERROR, _KINETO_HEAVY, heavy=True)
def _k_string(d: Path) -> list[str]:
    """A small gzip file holding one event whose name is an 800 MB string."""
    head = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 1, "name": "'
    return [str(gzip_repeat(d / "rank0.json.gz", head, b"a" * (1 << 20), 800, b'"}]}'))]


@case("kineto", "kineto_gzip_3m_kernels", ERROR, _KINETO_HEAVY, heavy=True)
def _k_kernels(d: Path) -> list[str]:
    """A small gzip file that expands to 3M NCCL kernel events."""
    t = kineto_trace()
    head = b'{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ['
    head += b",".join(json.dumps(e).encode() for e in t["traceEvents"][:3])
    block = (b"," + json.dumps(t["traceEvents"][3]).encode()) * 10_000
    return [str(gzip_repeat(d / "rank0.json.gz", head, block, 300, b"]}"))]


@case("kineto", "kineto_gzip_whitespace", ERROR, _KINETO_HEAVY, heavy=True)
def _k_space(d: Path) -> list[str]:
    """A gzip file of 4 GB of blanks between two events (a ratio no real trace has)."""
    t = json.dumps(kineto_trace()).encode()
    head, tail = t.split(b'"traceEvents": [', 1)
    head += b'"traceEvents": ['
    return [str(gzip_repeat(d / "rank0.json.gz", head, b" " * (1 << 20), 4096, tail))]


@case("kineto", "kineto_gzip_within_ratio", ERROR, _KINETO_HEAVY, heavy=True)
def _k_ratio(d: Path) -> list[str]:
    """300k NCCL kernels with distinct correlation ids and times, gzip at level 1: a ratio
    within what real traces have, so the kept events' budget is what must refuse it."""
    t = kineto_trace()
    p = d / "rank0.json.gz"
    k = t["traceEvents"][3]
    one = "," + json.dumps({**k, "ts": -1, "args": {**k["args"], "correlation": -2}})
    one = one.replace('"ts": -1', '"ts": %d').replace('"correlation": -2', '"correlation": %d')
    with gzip.open(p, "wt", compresslevel=1) as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [')
        f.write(",".join(json.dumps(e) for e in t["traceEvents"][:3]))
        f.write("".join(one % (2000 + i, 100 + i) for i in range(300_000)))
        f.write("]}")
    return [str(p)]


@case(
    "kineto", "kineto_plain_kernels_budget", ERROR, _KINETO_READ, heavy=True, env=(("NSYSCOMM_MEMORY_LIMIT", "100MB"),)
)
def _k_plain(d: Path) -> list[str]:
    """50k NCCL kernels with distinct correlation ids in plain JSON (no inflation to refuse):
    their memory is over the budget of a 100MB --memory-limit, which must say so."""
    t = kineto_trace()
    p = d / "rank0.json"
    with open(p, "w") as f:
        f.write('{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [')
        f.write(",".join(json.dumps(e) for e in t["traceEvents"][:3]))
        k = t["traceEvents"][3]
        for i in range(50_000):
            f.write("," + json.dumps({**k, "ts": 2000 + i, "args": {**k["args"], "correlation": 100 + i}}))
        f.write("]}")
    return [str(p)]
