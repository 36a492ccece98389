"""PyTorch Flight Recorder dumps (one pickle per rank, ``<prefix><rank>``) as a source of collectives.

Format: /work/shared/real/FORMATS.md section 2 (torch's FlightRecorderDetail.hpp). A dump holds
``version``, ``pg_config`` {pg_name: {name, desc, ranks}}, ``pg_status`` {pg_id: {last_*_collective}}
and ``entries``, each a call with its process group, ``collective_seq_id`` / ``p2p_seq_id``,
``profiling_name`` ("nccl:all_reduce"), input/output sizes and dtypes, and a state.

Dumps are pickles: they are read by nsyscomm.ingest.flight_recorder.unpickler, whose unpickler refuses every
global (only plain containers and scalars can come out of one) under a cap on size and objects,
and their fields checked by nsyscomm.ingest.flight_recorder.check before anything here reads them.
A call is finished when its state is "completed" or its seq is at or below its group's
``last_completed_collective`` (rows()' 'finished', read by nsyscomm.analyses.hang); in the
collectives table a call without a duration is zero-length.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from nsyscomm import schema
from nsyscomm.errors import InputError
from nsyscomm.ingest import limits
from nsyscomm.ingest.flight_recorder import check as fr_check
from nsyscomm.ingest.flight_recorder import unpickler as fr_pickle
from nsyscomm.ingest.names import canonical_op

if TYPE_CHECKING:
    from nsyscomm.ingest.extract_type import Extract

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


def looks_like(path: Path) -> bool:
    """A Flight Recorder dump by its name (ends in the rank) and its first bytes (a pickle's
    PROTO opcode): cheap, the content is not read. load_dump says whether it is a good one."""
    try:
        if not path.is_file() or not _NAME.match(path.name):
            return False
        with open(path, "rb") as f:
            head = f.read(2)
        return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5
    except OSError:
        return False


# The last dumps loaded, and the refusals: a dump is read by discovery, by its extract and by the
# hang diagnosis (is_dump, then rows) one after the other; a big one is read once
_LOADED: dict[tuple[str, int, int], dict | InputError] = {}
_KEEP = 2


def load_dump(path: Path) -> dict:
    """The dump's dict, its every field the ingest reads checked (types, ranges, finiteness), or
    InputError: one line naming the file, the field and the fix."""
    try:
        st = Path(path).stat()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}); check the path") from None
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _LOADED:
        try:
            got: dict | InputError = _load(Path(path))
        except InputError as e:
            got = e
        while len(_LOADED) >= _KEEP:
            del _LOADED[next(iter(_LOADED))]
        _LOADED[key] = got
    got = _LOADED[key]
    if isinstance(got, InputError):
        raise InputError(str(got))
    return got


def _load(path: Path) -> dict:
    try:
        d = fr_pickle.load(Path(path))
    except fr_pickle.Refused as e:
        raise InputError(f"{path}: a pickle past nsyscomm's limits ({e}); {fr_check.FIX} (docs/limits.md)") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}); check the path") from None
    except fr_pickle.ERRORS as e:
        first = str(e).splitlines()[0][:120] if str(e) else ""
        raise InputError(
            f"{path}: not a Flight Recorder dump of plain data ({type(e).__name__}: {first}); "
            f"pass the folder of the dumps TORCH_FR_DUMP_TEMP_FILE wrote"
        ) from None
    if not isinstance(d, dict) or "version" not in d or "pg_config" not in d:
        raise InputError(
            f"{path}: a pickle but not a Flight Recorder dump (no version/pg_config); "
            f"pass the folder of the dumps TORCH_FR_DUMP_TEMP_FILE wrote"
        )
    fr_check.check(d, Path(path))
    return d


def is_dump(path: Path) -> bool:
    """A good Flight Recorder dump: its name, first bytes and content (load_dump) say so."""
    if not looks_like(Path(path)):
        return False
    try:
        load_dump(Path(path))
        return True
    except InputError:
        return False


def _rank_digits(path: Path) -> int:
    m = _NAME.match(Path(path).name)
    return int(m.group(1)) if m and len(m.group(1)) < 20 else -1


def rank_of(path: Path) -> int:
    rank = _rank_digits(path)
    if not 0 <= rank < limits.MAX_GROUP:
        raise InputError(f"{path}: the name does not end in a rank below {limits.MAX_GROUP}; {fr_check.FIX}")
    return rank


def _bytes(sizes, dtypes) -> tuple[int | None, int | None, str | None]:
    if not sizes:
        return None, None, (dtypes[0] if dtypes else None)
    numel = sum(math.prod(s) for s in sizes)
    dt = dtypes[0] if dtypes else None
    per = _DTYPE_BYTES.get(dt) if dt else None
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
    """The dump's calls as collectives rows (plus 'finished' and 'state'); d: load_dump's."""
    d = d if d is not None else load_dump(path)
    rank = rank_of(path)
    cfg = d.get("pg_config") or {}
    status = d.get("pg_status") or {}
    joined: dict[str, str] = {}  # one string per group, shared by its calls (a group may hold 100k ranks)
    out = []
    for e in d.get("entries") or []:
        pg = e.get("process_group") or ("", "")
        pg_name = pg[0]
        conf = cfg.get(pg_name)
        if conf is None and len(pg) > 1 and pg[1] == "default_pg":
            # torch 2.13's gloo dumps list the default group under the name "" (its entries say "0")
            conf = cfg.get("")
        members = (conf or {}).get("ranks") or []
        if pg_name not in joined:
            joined[pg_name] = _group_ranks(members)
        name = e.get("profiling_name") or ""
        word, peer = _op(name)
        op = canonical_op(word) or word.strip("_")
        p2p = bool(e.get("is_p2p")) or op in ("send", "recv")
        seq = e.get("p2p_seq_id" if p2p else "collective_seq_id") or 0
        out_side = op == "all_gather"  # nccl-tests' S of an all-gather is its output
        nbytes, numel, dt = _bytes(
            e.get("output_sizes" if out_side else "input_sizes") or [],
            e.get("output_dtypes" if out_side else "input_dtypes") or [],
        )
        last_done = (status.get(str(e.get("pg_id"))) or {}).get("last_completed_collective", -1)
        state = e.get("state") or ""
        finished = state == "completed" or (not p2p and last_done is not None and seq <= last_done)
        start = e.get("time_created_ns") or None
        dur = e.get("duration_ms")
        # no end known: zero length (the analyses need an end; the hang diagnosis reads 'finished')
        end = (start + int(dur * 1e6)) if (finished and start and dur is not None) else start
        tid = str(e.get("thread_id", ""))
        out.append(
            {
                "rank": rank,
                "pid": rank,
                "tid": int(tid) if tid.isdigit() and len(tid) < 19 else None,
                "op": op,
                "api": name,
                "bytes": nbytes,
                "dtype": dt,
                "numel": numel,
                "group": pg_name,
                "group_desc": pg[1] if len(pg) > 1 else "",
                "group_size": len(members) or None,
                "group_ranks": joined[pg_name],
                "seq": seq,
                "caller": _frame(e),
                "cpu_start": start,
                "cpu_end": end,
                "peer": peer,
                "source": "flight_recorder",
                "state": state,
                "finished": finished,
                "completed": finished,  # the collectives column: an unfinished call has no latency
                "sizes": "x".join(map(str, (e.get("input_sizes") or [[]])[0])),
            }
        )
    return out


def _group_ranks(members: list[int]) -> str:
    """The group's ranks as the collectives table lists them, within limits.MAX_NAME: a long list
    of ranks 0..n-1 (the default group of a large job) is left empty, which says the same with
    group_size, as the wrapper does; another long one is cut and marked as limits.checked would.
    Every call of the group shares the one string (a group of 100k ranks over 2000 calls would
    otherwise be copied call by call into the tables)."""
    text = ",".join(map(str, members))
    if len(text) <= limits.MAX_NAME:
        return text
    if members == list(range(len(members))):
        return ""
    return text[: limits.MAX_NAME - len(limits.CUT_MARK)] + limits.CUT_MARK


def library_version(d: dict) -> str | None:
    """The communication library's version the dump names: ``comm_lib_version`` (format 2.10,
    torchcomms), ``nccl_version`` before it."""
    for key in ("comm_lib_version", "nccl_version"):
        v = d.get(key)
        if isinstance(v, str) and v:
            return limits.cut_name(v)
    return None


def describe(d: dict) -> str:
    """What made the dump, as the job's sources name it: "Flight Recorder 2.10 (library 2.27.3)"."""
    lib = library_version(d)
    v = d.get("version")
    version = limits.cut_name(v) if isinstance(v, str) else "?"
    return f"Flight Recorder {version}" + (f" (library {lib})" if lib else "")


def _frame(e: dict) -> str | None:
    frames = e.get("frames") or []
    for f in frames:
        if isinstance(f, dict) and f.get("filename") and "torch/" not in str(f.get("filename")):
            return f"{Path(str(f['filename'])).name}:{f.get('line')} {f.get('name', '')}".strip()
    return None


def extract(path: Path, report: str | None = None) -> Extract:
    """One dump -> an Extract (one rank) for nsyscomm.api.combine. A dump that fails its checks
    is an InputError, whatever sits beside it: discovery has already set aside the refused dumps
    of a folder or a pattern (each named with its reason), so one that reaches here was named."""
    from nsyscomm.ingest.extract_type import Extract

    path = Path(path)
    rank = rank_of(path)
    warnings: list[str] = []
    d = load_dump(path)
    rs, made_by = rows(path, d), describe(d)
    cols = [c for c in schema.COLUMN_NAMES if c not in ("report", "rank", "local_rank", "host")]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rs], columns=cols)
    types = schema.arrow_types()
    calls = pa.Table.from_pandas(df, schema=pa.schema([(c, types[c]) for c in cols]), preserve_index=False)
    starts = [r["cpu_start"] for r in rs if r["cpu_start"]]
    ends = [r["cpu_end"] or r["cpu_start"] for r in rs if r["cpu_start"]]
    markers = pd.DataFrame([{"pid": rank, "rank": rank, "local_rank": None, "world": None, "host": None}])
    spans = pd.DataFrame([{"pid": rank, "first_ns": min(starts) if starts else 0, "last_ns": max(ends) if ends else 0}])
    return Extract(
        report=report or path.name,
        path=path,
        calls=calls,
        markers=markers,
        spans=spans,
        warnings=warnings,
        nsys_version=made_by,
    )
