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

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from nsyscomm import schema
from nsyscomm.errors import InputError
from nsyscomm.ingest import fr_pickle, limits
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
_FIX = "pass the dump as torch wrote it (TORCH_FR_DUMP_TEMP_FILE), or leave this file out"
MAX_ENTRIES = 200_000  # calls in one dump: torch keeps TORCH_FR_BUFFER_SIZE (default 2000)
MAX_SEQ = 1 << 62  # sequence numbers, ids and epoch nanoseconds (year 2116) fit below it
MAX_DURATION_MS = 1e9  # 11 days: no collective call lasts longer, and start + duration fits in ns
MAX_DIM = 1 << 52  # a tensor dimension or element count (ingest.limits checks the sizes again)
# Ranks of one process group: a hang diagnosis names each missing one, and its report grows with
# them; the largest jobs run tens of thousands of ranks
MAX_GROUP = 65_536


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


def load_dump(path: Path) -> dict:
    """The dump's dict, its every field the ingest reads checked (types, ranges, finiteness), or
    InputError: one line naming the file, the field and the fix."""
    try:
        d = fr_pickle.load(Path(path))
    except fr_pickle.Refused as e:
        raise InputError(f"{path}: a pickle past nsyscomm's limits ({e}); {_FIX} (docs/limits.md)") from None
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
    _check(d, Path(path))
    return d


def _shown(v: object) -> str:
    """v in a few characters, safely: a container by its type (repr of a deep one recurses), a
    huge integer by its size (str() of one is refused past 4300 digits)."""
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        return f"a {type(v).__name__} of {len(v)}"
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    s = repr(v)
    return s if len(s) <= 40 else s[:40] + "…"


def _bad(path: Path, what: str, v: object, want: str) -> InputError:
    return InputError(f"{path}: {what} = {_shown(v)}, not {want}; {_FIX}")


def _int_in(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _check(d: dict, path: Path) -> None:
    """Every field rows() reads, of the type and range torch writes (FORMATS.md section 2)."""
    if not isinstance(d["pg_config"], dict):
        raise _bad(path, "pg_config", d["pg_config"], "a dict of process groups")
    for name, conf in d["pg_config"].items():
        if not isinstance(name, str) or not isinstance(conf, dict):
            raise _bad(path, f"pg_config[{_shown(name)}]", conf, "a dict with the group's ranks")
        conf["ranks"] = _ranks(conf.get("ranks", ""), path, f"pg_config[{name!r}].ranks")
    status = d.get("pg_status")
    if status is not None and not isinstance(status, dict):
        raise _bad(path, "pg_status", status, "a dict of process groups")
    for pg, st in (status or {}).items():
        if not isinstance(st, dict):
            raise _bad(path, f"pg_status[{_shown(pg)}]", st, "a dict of last_*_collective")
        done = st.get("last_completed_collective")
        if done is not None and not _int_in(done, -1, MAX_SEQ):
            raise _bad(path, f"pg_status[{_shown(pg)}].last_completed_collective", done, "a sequence number")
    entries = d.get("entries")
    if entries is None:
        return
    if not isinstance(entries, list):
        raise _bad(path, "entries", entries, "a list of calls")
    cap = MAX_ENTRIES
    if len(entries) > cap:
        raise InputError(
            f"{path}: {len(entries)} entries, more than {cap} (torch keeps TORCH_FR_BUFFER_SIZE of them); {_FIX}"
        )
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise _bad(path, f"entries[{i}]", e, "a dict")
        _check_entry(e, path, f"entries[{i}]")


_TEXTS = ("profiling_name", "state", "thread_name")
_IDS = ("collective_seq_id", "p2p_seq_id", "pg_id", "op_id", "record_id")
_TIMES = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


def _check_entry(e: dict, path: Path, at: str) -> None:
    pg = e.get("process_group")
    if pg is not None and not (
        isinstance(pg, (tuple, list)) and 1 <= len(pg) <= 2 and all(isinstance(x, str) for x in pg)
    ):
        raise _bad(path, f"{at}.process_group", pg, "a (name, description) pair of strings")
    for k in _TEXTS:
        if e.get(k) is not None and not isinstance(e[k], str):
            raise _bad(path, f"{at}.{k}", e[k], "a string")
    tid = e.get("thread_id")
    if tid is not None and not (isinstance(tid, str) and len(tid) <= 64 or _int_in(tid, 0, MAX_SEQ)):
        raise _bad(path, f"{at}.thread_id", tid, "a thread id")
    for k in _IDS:
        if e.get(k) is not None and not _int_in(e[k], -1, MAX_SEQ):
            raise _bad(path, f"{at}.{k}", e[k], f"an integer from 0 to {MAX_SEQ}")
    for k in _TIMES:  # 0 in torch's JSON dumps for "not known"
        if e.get(k) is not None and not _int_in(e[k], 0, MAX_SEQ):
            raise _bad(path, f"{at}.{k}", e[k], "nanoseconds since the epoch")
    dur = e.get("duration_ms")
    if dur is not None and not (
        isinstance(dur, (int, float)) and not isinstance(dur, bool) and 0 <= dur <= MAX_DURATION_MS
    ):  # NaN fails both comparisons
        raise _bad(path, f"{at}.duration_ms", dur, f"milliseconds from 0 to {MAX_DURATION_MS:.0e}")
    for side in ("input", "output"):
        sizes, dtypes = e.get(f"{side}_sizes"), e.get(f"{side}_dtypes")
        if sizes is not None and not (
            isinstance(sizes, list)
            and all(isinstance(s, list) and all(_int_in(x, 0, MAX_DIM) for x in s) for s in sizes)
        ):
            raise _bad(path, f"{at}.{side}_sizes", sizes, "a list of tensor shapes (lists of integers)")
        if sizes and sum(math.prod(s) for s in sizes) > MAX_DIM:
            raise _bad(path, f"{at}.{side}_sizes", sizes, f"shapes of at most {MAX_DIM} elements")
        if dtypes is not None and not (isinstance(dtypes, list) and all(isinstance(x, str) for x in dtypes)):
            raise _bad(path, f"{at}.{side}_dtypes", dtypes, "a list of dtype names")
    frames = e.get("frames")
    if frames is not None and not (
        isinstance(frames, list)
        and all(
            isinstance(f, dict)
            and all(isinstance(f.get(k), (str, type(None))) for k in ("name", "filename"))
            and isinstance(f.get("line"), (int, str, type(None)))
            for f in frames
        )
    ):
        raise _bad(path, f"{at}.frames", frames, "a list of {name, filename, line}")


def is_dump(path: Path) -> bool:
    """A good Flight Recorder dump: its name, first bytes and content (load_dump) say so."""
    if not looks_like(Path(path)):
        return False
    try:
        load_dump(Path(path))
        return True
    except InputError:
        return False


def dumps_in(folder: Path) -> list[Path]:
    """The dumps below folder, by their names and first bytes; the folder's first refused dump's
    reason (InputError) when none of them loads, so that the user reads why."""
    found = sorted(
        (p for p in Path(folder).rglob("*") if looks_like(p)),
        key=lambda p: (p.parent, _rank_digits(p)),
    )
    first_error = None
    for p in found:
        try:
            load_dump(p)
            return found
        except InputError as e:
            first_error = first_error or e
    if first_error is not None:
        raise first_error
    return found


def _rank_digits(path: Path) -> int:
    m = _NAME.match(Path(path).name)
    return int(m.group(1)) if m and len(m.group(1)) < 20 else -1


def rank_of(path: Path) -> int:
    rank = _rank_digits(path)
    if not 0 <= rank < limits.MAX_GROUP:
        raise InputError(f"{path}: the name does not end in a rank below {limits.MAX_GROUP}; {_FIX}")
    return rank


_RANK_LIST = re.compile(r"\s*[\[(]?\s*(?:\d+\s*(?:,\s*\d+\s*)*,?)?\s*[\])]?\s*")


def _ranks(text: object, path: Path, what: str) -> list[int]:
    """A group's ranks: torch writes the string "[0, 1, 2]"; a list of integers is read too."""
    if isinstance(text, (list, tuple)):
        if not all(_int_in(x, 0, limits.MAX_GROUP - 1) for x in text):
            raise _bad(path, what, text, f"a list of ranks below {limits.MAX_GROUP}")
        out = list(text)
    elif isinstance(text, str):
        if not _RANK_LIST.fullmatch(text):
            raise _bad(path, what, text, 'a list of ranks like "[0, 1]"')
        digits = re.findall(r"\d+", text)
        if any(len(x) > 9 for x in digits):
            raise _bad(path, what, text, f"a list of ranks below {limits.MAX_GROUP}")
        out = [int(x) for x in digits]
    else:
        raise _bad(path, what, text, 'a list of ranks like "[0, 1]"')
    if any(x >= limits.MAX_GROUP for x in out):
        raise _bad(path, what, text, f"ranks below {limits.MAX_GROUP}")
    cap = _max_group()
    if len(out) > cap:
        raise InputError(
            f"{path}: {what} lists {len(out)} ranks, more than {cap} (NSYSCOMM_FR_MAX_GROUP: raise it "
            f"for a real job this large, docs/limits.md)"
        )
    return out


def _max_group() -> int:
    v = os.environ.get("NSYSCOMM_FR_MAX_GROUP", "")
    return int(v) if v.isdigit() and int(v) > 0 else MAX_GROUP


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


def _frame(e: dict) -> str | None:
    frames = e.get("frames") or []
    for f in frames:
        if isinstance(f, dict) and f.get("filename") and "torch/" not in str(f.get("filename")):
            return f"{Path(str(f['filename'])).name}:{f.get('line')} {f.get('name', '')}".strip()
    return None


def extract(path: Path, report: str | None = None) -> Extract:
    """One dump -> an Extract (one rank) for nsyscomm.api.combine. A refused dump beside others
    (a rank killed while torch wrote its dump leaves it truncated) is skipped with a warning
    naming it and why, so the other ranks' dumps still say who hung; alone, it is an InputError."""
    from nsyscomm.ingest.nsys.extract import Extract

    path = Path(path)
    rank = rank_of(path)
    warnings: list[str] = []
    try:
        rs = rows(path)
    except InputError as e:
        if not any(p != path and looks_like(p) for p in path.parent.iterdir()):
            raise
        rs, warnings = [], [f"{e} -- skipped, the other dumps read"]
    cols = [c for c in schema.COLUMN_NAMES if c not in ("report", "rank", "local_rank", "host")]
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rs], columns=cols)
    types = schema.arrow_types()
    calls = pa.Table.from_pandas(df, schema=pa.schema([(c, types[c]) for c in cols]), preserve_index=False)
    starts = [r["cpu_start"] for r in rs if r["cpu_start"]]
    ends = [r["cpu_end"] or r["cpu_start"] for r in rs if r["cpu_start"]]
    markers = pd.DataFrame([{"pid": rank, "rank": rank, "local_rank": None, "world": None, "host": None}])
    spans = pd.DataFrame([{"pid": rank, "first_ns": min(starts) if starts else 0, "last_ns": max(ends) if ends else 0}])
    return Extract(report=report or path.name, path=path, calls=calls, markers=markers, spans=spans, warnings=warnings)
