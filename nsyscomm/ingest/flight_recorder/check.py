"""The edge of a Flight Recorder dump: every field nsyscomm.ingest.flight_recorder.dump
reads, of the type and range torch writes (FORMATS.md section 2), checked once where the dump is
loaded; a failure is one line naming the file, the field and the fix (docs/limits.md)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from nsyscomm import settings
from nsyscomm.errors import InputError
from nsyscomm.ingest import limits

FIX = "pass the dump as torch wrote it (TORCH_FR_DUMP_TEMP_FILE), or leave this file out"
MAX_ENTRIES = 200_000  # calls in one dump: torch keeps TORCH_FR_BUFFER_SIZE (default 2000)
MAX_SEQ = 1 << 62  # sequence numbers, ids and epoch nanoseconds (year 2116) fit below it
MAX_DURATION_MS = 1e9  # 11 days: no collective call lasts longer, and start + duration fits in ns
MAX_DIM = 1 << 52  # a tensor dimension or element count (ingest.limits checks the sizes again)
# Ranks of one process group: a hang diagnosis names each missing one, and its report grows with
# them; the largest jobs run tens of thousands of ranks
MAX_GROUP = 65_536


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
    return InputError(f"{path}: {what} = {_shown(v)}, not {want}; {FIX}")


def _int_in(v: object, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def check(d: dict, path: Path) -> None:
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
            f"{path}: {len(entries)} entries, more than {cap} (torch keeps TORCH_FR_BUFFER_SIZE of them); {FIX}"
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
    return settings.fr_max_group() or MAX_GROUP
