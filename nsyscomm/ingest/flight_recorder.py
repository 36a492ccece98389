"""PyTorch Flight Recorder dumps (one pickle per rank, ``<prefix><rank>``) as a source of collectives.

Format: /work/shared/real/FORMATS.md section 2 (torch's FlightRecorderDetail.hpp). A dump holds
``version``, ``pg_config`` {pg_name: {name, desc, ranks}}, ``pg_status`` {pg_id: {last_*_collective}}
and ``entries``, each a call with its process group, ``collective_seq_id`` / ``p2p_seq_id``,
``profiling_name`` ("nccl:all_reduce"), input/output sizes and dtypes, and a state.

Dumps are pickles: they are read with an unpickler whose find_class refuses every global, so
only plain containers and scalars can come out of one (no object of any class is constructed).
A call is finished when its state is "completed" or its seq is at or below its group's
``last_completed_collective`` (rows()' 'finished', read by nsyscomm.analyses.hang); in the
collectives table a call without a duration is zero-length.
"""

from __future__ import annotations

import ast
import io
import math
import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from nsyscomm import schema
from nsyscomm.errors import InputError
from nsyscomm.ingest.names import canonical_op

if TYPE_CHECKING:
    from nsyscomm.ingest.nsys.extract import Extract

_NAME = re.compile(r".*?(\d+)$")
_DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}
_MAX_SIZE = 64 << 20  # a dump of a 16-rank job is a few kB; past this it is not one


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # every class and function refused: containers and scalars only
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _looks_like(path: Path) -> bool:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_SIZE or not _NAME.match(path.name):
            return False
        with open(path, "rb") as f:
            head = f.read(2)
        return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5  # a pickle's PROTO opcode
    except OSError:
        return False


def load_dump(path: Path) -> dict:
    """The dump's dict, or InputError (one line naming the file and the fix)."""
    try:
        data = Path(path).read_bytes()
        d = _PlainUnpickler(io.BytesIO(data)).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        MemoryError,
        RecursionError,
    ) as e:
        raise InputError(
            f"{path}: not a Flight Recorder dump of plain data ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); pass the folder of the dumps "
            f"TORCH_FR_DUMP_TEMP_FILE wrote"
        ) from None
    if not isinstance(d, dict) or "version" not in d or "pg_config" not in d:
        raise InputError(
            f"{path}: a pickle but not a Flight Recorder dump (no version/pg_config); "
            f"pass the folder of the dumps TORCH_FR_DUMP_TEMP_FILE wrote"
        )
    return d


def is_dump(path: Path) -> bool:
    """A Flight Recorder dump, by its name (ends in the rank) and content."""
    if not _looks_like(Path(path)):
        return False
    try:
        load_dump(Path(path))
        return True
    except InputError:
        return False


def dumps_in(folder: Path) -> list[Path]:
    return sorted(
        (p for p in Path(folder).rglob("*") if _looks_like(p) and is_dump(p)),
        key=lambda p: (p.parent, int(_NAME.match(p.name).group(1))),
    )


def rank_of(path: Path) -> int:
    return int(_NAME.match(Path(path).name).group(1))


def _ranks(text) -> list[int]:
    if isinstance(text, (list, tuple)):
        return [int(x) for x in text]
    try:
        v = ast.literal_eval(str(text))
        return [int(x) for x in v]
    except (ValueError, SyntaxError, TypeError):
        return []


def _bytes(sizes, dtypes) -> tuple[int | None, int | None, str | None]:
    if not sizes:
        return None, None, (dtypes[0] if dtypes else None)
    numel = sum(math.prod(s) for s in sizes)
    dt = dtypes[0] if dtypes else None
    per = _DTYPE_BYTES.get(dt)
    return (numel * per if per else None), numel, dt


def _op(name: str) -> tuple[str, int | None]:
    """'nccl:all_reduce' -> ('all_reduce', None); 'nccl:send 0->3' -> ('send', 3); recv 0<-1 -> ('recv', 1)."""
    body = name.split(":", 1)[-1].strip()
    word, _, rest = body.partition(" ")
    peer = None
    m = re.search(r"(?:->|<-)\s*(\d+)", rest)
    if m:
        peer = int(m.group(1))
    return word, peer


def rows(path: Path, d: dict | None = None) -> list[dict]:
    """The dump's calls as collectives rows (plus 'finished' and 'state')."""
    d = d if d is not None else load_dump(path)
    rank = rank_of(path)
    cfg = d.get("pg_config") or {}
    status = d.get("pg_status") or {}
    out = []
    for e in d.get("entries") or []:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group") or ("", "")
        pg_name = str(pg[0])
        conf = cfg.get(pg_name)
        if conf is None and len(pg) > 1 and pg[1] == "default_pg":
            # torch 2.13's gloo dumps list the default group under the name "" (its entries say "0")
            conf = cfg.get("")
        members = _ranks((conf or {}).get("ranks", ""))
        word, peer = _op(str(e.get("profiling_name", "")))
        op = canonical_op(word) or word.strip("_")
        p2p = bool(e.get("is_p2p")) or op in ("send", "recv")
        seq = int(e.get("p2p_seq_id" if p2p else "collective_seq_id", 0) or 0)
        out_side = op == "all_gather"  # nccl-tests' S of an all-gather is its output
        nbytes, numel, dt = _bytes(
            e.get("output_sizes" if out_side else "input_sizes") or [],
            e.get("output_dtypes" if out_side else "input_dtypes") or [],
        )
        last_done = (status.get(str(e.get("pg_id"))) or {}).get("last_completed_collective", -1)
        state = str(e.get("state", ""))
        finished = state == "completed" or (not p2p and last_done is not None and seq <= int(last_done))
        start = int(e.get("time_created_ns") or 0) or None
        dur = e.get("duration_ms")
        # no end known: zero length (the analyses need an end; the hang diagnosis reads 'finished')
        end = (start + int(float(dur) * 1e6)) if (finished and start and dur is not None) else start
        out.append(
            {
                "rank": rank,
                "pid": rank,
                "tid": int(e["thread_id"]) if str(e.get("thread_id", "")).isdigit() else None,
                "op": op,
                "api": str(e.get("profiling_name", "")),
                "bytes": nbytes,
                "dtype": dt,
                "numel": numel,
                "group": pg_name,
                "group_desc": str(pg[1]) if len(pg) > 1 else "",
                "group_size": len(members) or None,
                "group_ranks": ",".join(map(str, members)),
                "seq": seq,
                "caller": _frame(e),
                "cpu_start": start,
                "cpu_end": end,
                "peer": peer,
                "source": "flight_recorder",
                "state": state,
                "finished": finished,
                "sizes": "x".join(map(str, (e.get("input_sizes") or [[]])[0])),
            }
        )
    return out


def _frame(e: dict) -> str | None:
    frames = e.get("frames") or []
    for f in frames:
        if isinstance(f, dict) and f.get("filename") and "torch/" not in str(f.get("filename")):
            return f"{Path(str(f['filename'])).name}:{f.get('line')} {f.get('name', '')}".strip()
    return None


def extract(path: Path, report: str | None = None) -> Extract:
    """One dump -> an Extract (one rank) for nsyscomm.api.combine."""
    from nsyscomm.ingest.nsys.extract import Extract

    path = Path(path)
    rs = rows(path)
    rank = rank_of(path)
    cols = [c for c in schema.COLUMN_NAMES if c not in ("report", "rank", "local_rank", "host")]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rs], columns=cols)
    types = schema.arrow_types()
    calls = pa.Table.from_pandas(df, schema=pa.schema([(c, types[c]) for c in cols]), preserve_index=False)
    starts = [r["cpu_start"] for r in rs if r["cpu_start"]]
    ends = [r["cpu_end"] or r["cpu_start"] for r in rs if r["cpu_start"]]
    markers = pd.DataFrame([{"pid": rank, "rank": rank, "local_rank": None, "world": None, "host": None}])
    spans = pd.DataFrame([{"pid": rank, "first_ns": min(starts) if starts else 0, "last_ns": max(ends) if ends else 0}])
    return Extract(report=report or path.name, path=path, calls=calls, markers=markers, spans=spans, warnings=[])
