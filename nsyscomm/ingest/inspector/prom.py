"""NCCL Inspector's Prometheus mode (``NCCL_INSPECTOR_PROM_DUMP=1``, NCCL 2.30+): the
``nccl_inspector_metrics_<gpu>.prom`` files it rewrites each interval hold, per GPU, communicator
and (op, message-size bucket, algorithm and protocol), the bucket's mean bus bandwidth (geometric)
and mean execution time -- no call of its own. Read into one table of buckets
(``Extract.inspector_buckets``), shown where a folder has nothing else.

Source: NVIDIA/nccl ``plugins/profiler/inspector/inspector_prom.cc`` (labels ``version``,
``slurm_job_id``, ``node``, ``gpu``, ``comm_name``, ``n_nodes``, ``nranks``, then ``collective``,
``message_size``, ``algo_proto`` or ``p2p_operation``, ``message_size``; values ``%.6g``; the
size bucket ``<lo>-<hi><unit>`` of 1024-based units, lo the size's floor in that unit)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.inspector.records import FUNCS

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

FIX = "pass the .prom files NCCL_INSPECTOR_PROM_DUMP wrote, or leave this file out"
_NAME = re.compile(r"^nccl_inspector_metrics_.+\.prom$")
_LINE = re.compile(r"^(nccl_[a-z0-9_]+)\{(.*)\}\s+(\S+)\s*$")
_LABEL = re.compile(r'([a-zA-Z0-9_]+)="((?:[^"\\]|\\.)*)"')
_BUCKET = re.compile(r"^(\d+)-(\d+)(B|KB|MB|GB|TB)$")
_UNIT = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
MAX_BYTES = 64 << 20  # a metrics file is one line per bucket: a few thousand lines at most
# metric -> (point-to-point, the column it fills)
_METRICS = {
    "nccl_bus_bandwidth_gbs": (False, "busbw_gbs"),
    "nccl_collective_exec_time_microseconds": (False, "exec_us"),
    "nccl_p2p_bus_bandwidth_gbs": (True, "busbw_gbs"),
    "nccl_p2p_exec_time_microseconds": (True, "exec_us"),
}


def looks_like(path: Path) -> bool:
    """A metrics file by its name and first bytes (a # HELP line or an nccl_ metric)."""
    if not _NAME.match(path.name):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith((b"# HELP nccl_", b"# TYPE nccl_", b"nccl_"))


def _bucket(label: str) -> tuple[int | None, int | None]:
    m = _BUCKET.match(label)
    if not m:
        return None, None
    unit = _UNIT[m.group(3)]
    return int(m.group(1)) * unit, int(m.group(2)) * unit


def buckets(path: Path) -> pd.DataFrame:
    """One row per (GPU, communicator, op, size bucket, algorithm/protocol) of the file."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{path}: larger than {MAX_BYTES >> 20} MiB, not a metrics file; {FIX}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read ({getattr(e, 'strerror', None) or type(e).__name__}); {FIX}") from None
    rows: dict[tuple, dict] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m or m.group(1) not in _METRICS:
            continue  # another exporter's metric in the same file
        p2p, col = _METRICS[m.group(1)]
        labels = {k: limits.cut_name(v) for k, v in _LABEL.findall(m.group(2))}
        try:
            value = float(m.group(3))
        except ValueError:
            raise InputError(f"{path}: line {i}: the value {m.group(3)[:40]!r} is not a number; {FIX}") from None
        api = labels.get("p2p_operation" if p2p else "collective", "")
        key = tuple(labels.get(k, "") for k in ("node", "gpu", "comm_name", "nranks", "n_nodes", "message_size"))
        key += (api, labels.get("algo_proto", ""))
        row = rows.setdefault(key, {"labels": labels, "api": api})
        row[col] = value if value == value and abs(value) < 1e18 else None
    out = []
    for (node, gpu, comm, nranks, n_nodes, size, api, algo), r in rows.items():
        lo, hi = _bucket(size)
        out.append(
            {
                "node": node,
                "gpu": gpu,
                "comm_name": comm,
                "nranks": int(nranks) if nranks.isdigit() and len(nranks) < 9 else None,
                "n_nodes": int(n_nodes) if n_nodes.isdigit() and len(n_nodes) < 9 else None,
                "op": FUNCS[api][0] if api in FUNCS else None,
                "api": api,
                "algo_proto": algo or None,
                "message_size": size,
                "bucket_lo": lo,
                "bucket_hi": hi,
                "busbw_gbs": r.get("busbw_gbs"),
                "exec_us": r.get("exec_us"),
            }
        )
    if not out:
        raise InputError(f"{path}: no NCCL Inspector metric in it; {FIX}")
    from nsyscomm.ingest.extract_type import TABLE

    return pd.DataFrame(out, columns=TABLE["inspector_buckets"].column_names)


def extract(path: Path, report: str | None = None) -> Extract:
    """A metrics file -> an Extract without calls, holding its buckets."""
    import pyarrow as pa

    from nsyscomm import schema
    from nsyscomm.ingest.extract_type import Extract

    path = Path(path)
    table = buckets(path)
    types = schema.arrow_types()
    cols = [c for c in schema.COLUMN_NAMES if c not in ("report", "rank", "local_rank", "host")]
    calls = pa.Table.from_pylist([], schema=pa.schema([(c, types[c]) for c in cols]))
    empty = pd.DataFrame(columns=["pid", "rank", "local_rank", "world", "host"])
    spans = pd.DataFrame(columns=["pid", "first_ns", "last_ns"])
    return Extract(
        report=report or path.name,
        path=path,
        calls=calls,
        markers=empty,
        spans=spans,
        nsys_version="NCCL Inspector (Prometheus)",
        inspector_buckets=table,
    )
